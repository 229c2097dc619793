"""Chapter 1's exercises: what the generic registry and notebook tests cannot know.

The generic tests (tests/test_exercise_registries.py, tests/test_notebooks.py) already check that
every reference passes its cases, every slip fails with its own message and every solution cell
passes its hidden tests. Here: the solutions taken from the notebook pass in this process too, the
hidden cases discriminate (greedy rows that end at different steps, beams that beat greedy), the
visible tests catch a transposed weight and the other slips, the questions' slips cover every
wrong letter without giving the answer away, and a solution that leans on another exercise's
reference is caught.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch

from course_lib import attention, decoding, grading
from course_lib.exercises import seq2seq as ex1
from tests.conftest import load, release_notebook, setup_namespace, solution
from tests.questions import answer

pytestmark = pytest.mark.ch01

SLUG = "01-seq2seq"
NAMES = [exercise_id.split(".", 1)[1] for exercise_id in ex1.EXERCISES]


@pytest.mark.parametrize("name", NAMES)
def test_the_notebooks_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"seq2seq.{name}", solution(SLUG, name), answer(f"seq2seq.{name}"))
    assert grading.format_failures(f"seq2seq.{name}", results) is None


def test_the_registry_follows_the_notebooks_order() -> None:
    graded = [c["metadata"]["nbgrader"]["grade_id"] for c in load(release_notebook(SLUG))["cells"]
              if c["metadata"].get("nbgrader", {}).get("solution")]
    assert graded == NAMES


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


# Visible tests catch the usual mistakes ------------------------------------------------------

def _positional(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The slip ``fn`` with the signature of the notebook's function (visible tests call it
    positionally)."""
    params = list(inspect.signature(solution(SLUG, name)).parameters)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return fn(**dict(zip(params, args)), **kwargs)

    return wrapped


VISIBLY_CAUGHT = [(name, k) for name in ("masked_softmax", "additive_score", "context_vector",
                                         "attention_decoder_step", "beam_search")
                  for k in range(len(ex1.EXERCISES[f"seq2seq.{name}"].slips))]


@pytest.mark.parametrize("name,k", VISIBLY_CAUGHT)
def test_the_visible_tests_catch_each_slip(name: str, k: int, capsys) -> None:
    """The released test cell (visible part only) fails on the slip, before any hidden test."""
    slip = ex1.EXERCISES[f"seq2seq.{name}"].slips[k]
    namespace = setup_namespace(SLUG)
    namespace[name] = _positional(slip.fn, name)
    cell = next(c for c in load(release_notebook(SLUG))["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == f"{name}_test")
    with pytest.raises(Exception) as err:
        exec("".join(cell["source"]), namespace)
    assert not isinstance(err.value, NotImplementedError)
    assert "visible tests passed" not in capsys.readouterr().out


# The reference guard across exercises --------------------------------------------------------

def test_calling_another_exercises_reference_is_caught_too() -> None:
    def context_via_masked_softmax(scores, values, mask=None):
        weights = attention.masked_softmax(scores, mask)
        return weights @ values, weights

    results = grading.evaluate("seq2seq.context_vector", context_via_masked_softmax)
    assert all(r.reference_called == "seq2seq.masked_softmax" for r in results)
    message = grading.format_failures("seq2seq.context_vector", results)
    assert message is not None and "calls course_lib's implementation" in message


def test_the_decoding_slips_never_use_a_reference() -> None:
    """The slips run in the trusted judge; they must not lean on the graded references either."""
    forbidden = grading.forbidden_code_objects("seq2seq")
    for exercise_id in ("seq2seq.greedy_decode", "seq2seq.beam_search"):
        ex = ex1.EXERCISES[exercise_id]
        for slip in ex.slips:
            for case in ex.cases():
                _, hit = grading.run_guarded(lambda: ex.run(slip.fn, case.inputs()), forbidden)
                assert hit is None, f"{slip.message!r} calls {hit}"


def test_beam_diagnosis_names_an_inconsistent_score() -> None:
    """Not one wrong implementation, so a diagnosis: the score must match the tokens returned."""
    ex = ex1.EXERCISES["seq2seq.beam_search"]
    case = ex.cases()[1]
    got = grading.to_plain(ex.run(decoding.beam_search, case.inputs()))
    got[1] = 0.0 * got[1]
    message = grading.judge(ex, case, got, None, None)
    assert message is not None and "not the total log-probability" in message
