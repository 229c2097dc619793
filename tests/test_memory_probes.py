"""The memory rules' probes (``course_lib.grading.MemoryProbe``): sized so that the algorithm a
statement asks for fits its budget easily and the tensor the rule forbids does not fit at all.

The hardened grader enforces the budget from outside the student's process (the sandbox's
cgroup and address-space limits, ``autograder.run.hardened._Run.memory_probe``); the chapters'
hardened batches (``tests/test_autograder_chapters.py``, copy ``meter-off``) show a forbidden
tensor failing there. Here, in this process: the reference's largest allocation on the probe
against the budget, and each naive answer's (tests/adversarial/memory.py) against it.
"""

from __future__ import annotations

import pytest
import torch

from course_lib import grading
from course_lib.exercises._common import using_secret
from tests.adversarial import memory

PROBED = [ex for chapter in grading.exercise_chapters()
          for ex in grading.chapter_exercises(chapter).values() if ex.memory_probe is not None]


def _naive(exercise_id: str):
    namespace: dict = {}
    exec(memory.NAIVE[exercise_id], namespace)  # test data: a known-bad answer
    return namespace[exercise_id.split(".", 1)[1]]


def test_every_memory_rule_has_a_probe_and_a_naive_answer() -> None:
    """A statement's memory rule (``largest_tensor``, the notebook's own check) is graded only
    through a probe; each probe has a naive answer the chapters' batches try."""
    bounded = {ex.id for chapter in grading.exercise_chapters()
               for ex in grading.chapter_exercises(chapter).values()
               if ex.largest_tensor is not None}
    assert bounded == {ex.id for ex in PROBED}
    assert set(memory.NAIVE) == bounded


def test_a_probe_budget_is_at_most_half_the_forbidden_tensor() -> None:
    with pytest.raises(ValueError, match="at most half"):
        grading.MemoryProbe("x", dict, budget_bytes=600, forbidden_bytes=1000)


def _bytes_largest(fn, inputs, ex=None) -> tuple[object, int]:
    meter = grading.AllocationMeter()
    with meter:
        out = fn(**inputs) if ex is None else ex.run(fn, inputs)  # through a call adapter
    itemsize = max(v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
    return out, meter.largest * itemsize


@pytest.mark.slow
@pytest.mark.parametrize("ex", PROBED, ids=[ex.id for ex in PROBED])
def test_the_reference_fits_the_budget_and_the_naive_answer_is_right(ex) -> None:
    """The reference needs under an eighth of the budget; the naive answer is right and blinds
    the meter in its own process, so only the grader's outside limit can catch it."""
    probe = ex.memory_probe
    with using_secret("memory-probe-test"):
        inputs = probe.inputs()
    expected, used = _bytes_largest(ex.reference, inputs, ex)
    assert used * 8 < probe.budget_bytes, f"{ex.id}: the reference allocates {used:,} bytes"
    got, naive_seen = _bytes_largest(_naive(ex.id), inputs, ex)
    assert naive_seen == 0, "the naive answers switch the in-kernel meter off: it sees nothing"
    message = grading.compare_plain(grading.to_plain(got), grading.to_plain(expected),
                                    probe.rtol, probe.atol)
    assert message is None, f"{ex.id}: the naive answer is not even right: {message}"
