"""Chapter 1's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 1 as for every chapter, that the notebook's solutions
pass their visible and hidden tests, that the registry follows the notebook, that the visible
tests catch the slips (a transposed weight among them) and that a solution leaning on another
exercise's reference is caught. Here: the hidden cases discriminate (greedy rows that end at
different steps, beams that beat greedy), a square weight lets a transposition run and get its
message, the decoding slips lean on no reference, and an inconsistent beam score is diagnosed.
"""

from __future__ import annotations

import pytest

from course_lib import decoding, grading
from course_lib.exercises import seq2seq as ex1

pytestmark = pytest.mark.ch01


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
