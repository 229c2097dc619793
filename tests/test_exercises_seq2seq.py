"""Chapter 1's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 1 as for every chapter, that the notebook's solutions
pass their visible and hidden tests, that the registry follows the notebook, that the visible
tests catch the slips (a transposed weight among them) and that a solution leaning on another
exercise's reference is caught. Here: the hidden cases discriminate (greedy rows that end at
different steps, beams that beat greedy), a square weight lets a transposition run and get its
message, the decoding slips lean on no reference, and an inconsistent beam score is diagnosed;
the given decoder step of the debug exercise is its first slip and is uniform as the statement
says; the beam_cost cases bind the beam width; the decoding visible tests import nothing of
course_lib but grading.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from course_lib import decoding, grading
from course_lib.exercises import seq2seq as ex1
from tests.conftest import setup_namespace, source_notebook, visible_tests

pytestmark = pytest.mark.ch01

SLUG = "01-seq2seq"


# Hidden cases that discriminate --------------------------------------------------------------

def test_greedy_and_beam_cases_are_discriminating() -> None:
    """Some greedy case has rows that stop at different steps; most beam cases beat greedy."""
    ragged = False
    for case in ex1.EXERCISES["seq2seq.greedy_decode"].cases():
        inputs = case.inputs()
        out = decoding.greedy_decode(**inputs)
        new = out[:, inputs["prompt"].shape[1]:]
        ends = {int((row == 0).int().argmax()) if (row == 0).any() else -1 for row in new}
        ragged |= len(ends) > 1
    assert ragged
    beats = 0
    for case in ex1.EXERCISES["seq2seq.beam_search"].cases():
        inputs = case.inputs()
        tokens, _ = decoding.beam_search(**inputs)
        greedy = decoding.greedy_decode(inputs["step"], inputs["prompt"], inputs["max_new_tokens"],
                                        inputs["eos_id"])[0]
        beats += tokens.tolist() != greedy.tolist()
    assert beats >= 5


def test_a_square_weight_case_exists_so_a_transposed_weight_runs_and_is_named() -> None:
    """With non-square weights a transposition is a shape error; one square case lets it run and
    get the nn.Linear message instead of a bare RuntimeError."""
    for exercise_id, weight in (("seq2seq.additive_score", "W_q"),
                                ("seq2seq.attention_decoder_step", "W_q")):
        shapes = [tuple(case.inputs()[weight].shape) for case in ex1.EXERCISES[exercise_id].cases()]
        assert any(a == b for a, b in shapes) and any(a != b for a, b in shapes), shapes
        message = next(s.message for s in ex1.EXERCISES[exercise_id].slips
                       if "nn.Linear" in s.message)
        assert "W_q.T" in message


# The slips run in the trusted judge --------------------------------------------------------

def test_the_decoding_slips_never_use_a_reference() -> None:
    """The slips run in the trusted judge; they must not lean on the graded references either."""
    forbidden = grading.forbidden_code_objects("seq2seq")
    for exercise_id in ("seq2seq.greedy_decode", "seq2seq.beam_search"):
        ex = ex1.EXERCISES[exercise_id]
        for slip in ex.slips:
            for case in ex.cases():
                _, hit = grading.run_guarded(
                    lambda ex=ex, slip=slip, case=case: ex.run(slip.fn, case.inputs()), forbidden)
                assert hit is None, f"{slip.message!r} calls {hit}"


def test_beam_diagnosis_names_an_inconsistent_score() -> None:
    """Not one wrong implementation, so a diagnosis: the score must match the tokens returned."""
    ex = ex1.EXERCISES["seq2seq.beam_search"]
    case = ex.cases()[1]
    got = grading.to_plain(ex.run(decoding.beam_search, case.inputs()))
    got[1] = 0.0 * got[1]
    message = grading.judge(ex, case, got, None, None)
    assert message is not None and "not the total log-probability" in message


# The worked-out exercises: beam_cost and the given decoder step ----------------------------

def _given_decoder_step() -> Any:
    """The notebook's ``given_decoder_step``: the def of its demo cell, on the setup cell only."""
    import nbformat

    nb = nbformat.read(source_notebook(SLUG), as_version=4)
    (cell,) = [c for c in nb.cells if c.source.startswith("def given_decoder_step(")]
    namespace = setup_namespace(SLUG)
    exec(compile(cell.source.split("\n\ntorch.manual_seed")[0], "<given step>", "exec"), namespace)
    return namespace["given_decoder_step"]


def test_the_given_step_is_the_first_slip_and_its_weights_ignore_the_state() -> None:
    """The slip that names the unfixed step is the notebook's given step, on every hidden case;
    its weights are uniform over the real tokens (what the statement says of it)."""
    ex = ex1.EXERCISES["seq2seq.attention_decoder_step"]
    given, slip = _given_decoder_step(), ex.slips[0]
    assert "given step" in slip.message
    for case in ex.cases():
        inputs = case.inputs()
        for a, b in zip(given(**inputs), slip.fn(**inputs)):
            torch.testing.assert_close(a, b)
        weights = given(**inputs)[2]
        real = inputs["memory_mask"]
        uniform = real / real.sum(-1, keepdim=True)
        torch.testing.assert_close(weights, uniform.to(weights.dtype))
    assert [r.message for r in grading.evaluate(ex.id, given) if r.message]


def test_the_beam_cost_cases_bind_the_beam_width_after_the_first_step() -> None:
    """Some hidden case has V^t < k at a step t >= 1 (so k n and k-from-the-second-step both
    fail), and some has a vocabulary far larger than the beam."""
    binding = large = False
    for case in ex1.EXERCISES["seq2seq.beam_cost"].cases():
        x = case.inputs()
        k, V, n = x["beam_width"], x["vocab_size"], x["max_new_tokens"]
        binding |= n >= 3 and V < k
        large |= V >= 1000 and k < V
    assert binding and large


def test_the_beam_cost_cases_are_too_large_to_search_and_count() -> None:
    """Every hidden case ranks at least 10^8 candidates in all (running a search and counting
    its calls cannot pass within the grader's time), and some count passes 2^53 (a float answer
    is not exact); a counting loop over the steps, as a student may write, still passes."""
    ex = ex1.EXERCISES["seq2seq.beam_cost"]
    beyond_float = False
    for case in ex.cases():
        x = case.inputs()
        prefixes, tokens, candidates = decoding.beam_search_cost(**x)
        assert prefixes * x["vocab_size"] >= 10 ** 8, case
        beyond_float |= tokens > 2 ** 53
    assert beyond_float

    def counting_loop(beam_width: int, vocab_size: int, max_new_tokens: int,
                      prompt_len: int) -> tuple[int, int, int]:
        prefixes = tokens = widest = 0
        beam = 1
        for t in range(max_new_tokens):
            prefixes, tokens = prefixes + beam, tokens + beam * (prompt_len + t)
            widest, beam = max(widest, beam), min(beam_width, beam * vocab_size)
        return prefixes, tokens, widest * vocab_size

    assert [r.message for r in grading.evaluate(ex.id, counting_loop)] == [None] * 6


def test_the_decoding_visible_tests_need_no_course_lib_module() -> None:
    """greedy_decode's and beam_search's visible tests build their own toy step."""
    for name in ("greedy_decode", "beam_search", "beam_cost"):
        text = visible_tests(SLUG, name)
        assert "decoding" not in text, name


def test_offset_attention_is_graded_by_the_rule_not_one_design() -> None:
    """Another valid design (other scales, units swapped) passes every hidden case; a monotone
    score, a bump at i - offset, wrong shapes and a peak too low each fail some case."""
    ex = ex1.EXERCISES["seq2seq.offset_attention"]

    def other(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s, c, L = 40.0, 10.0, 30.0
        W_q = torch.tensor([[-s, -c - s * offset], [-s, c - s * offset]], dtype=torch.float64)
        W_k = torch.tensor([[s, 0.0], [s, 0.0]], dtype=torch.float64)
        return W_q, W_k, torch.tensor([-L, L], dtype=torch.float64)

    assert [r.message for r in grading.evaluate(ex.id, other)] == [None] * len(ex.cases())

    def monotone(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (torch.tensor([[1.0, -offset], [0.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]]),
                torch.tensor([50.0, 0.0]))

    def mirrored(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return other(-offset, n)

    def wide(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        W_q, W_k, v = other(offset, n)
        return torch.cat([W_q, W_q]), torch.cat([W_k, W_k]), torch.cat([v, v])

    for wrong in (monotone, mirrored, wide, ex.slips[0].fn):
        assert any(r.message for r in grading.evaluate(ex.id, wrong)), wrong
    flat = [r.message for r in grading.evaluate(ex.id, ex.slips[0].fn) if r.message]
    assert all(ex.slips[0].message in m for m in flat)
    wrong_shape = [r.message for r in grading.evaluate(ex.id, wide) if r.message]
    assert all("(2, 2)" in m for m in wrong_shape)
