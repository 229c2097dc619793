"""One verdict path: a case's outcome (output, error, reference call) turned into words.

:func:`run_student` runs the student's function on one case under the reference guard (and the
allocation meter where the exercise bounds memory); :func:`judge` alone turns the outcome into
the message a student reads, in the kernel (compare mode) and in the trusted judge alike. The
common mistakes of an exercise are data (:class:`~course_lib.grading.exercise.Slip`): a wrong
implementation and the message a student gets when their output equals its output.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from course_lib.grading.exercise import Case, Exercise, GradingError
from course_lib.grading.guard import REFERENCE_CALL_MESSAGE, STRIPPED_MARKER, run_guarded
from course_lib.grading.meter import AllocationMeter
from course_lib.grading.plain import compare_plain, to_plain
from course_lib.grading.questions import Question


@dataclass
class CaseResult:
    """Outcome of one case: ``message`` is ``None`` when it passed."""

    index: int
    name: str
    message: str | None = None
    reference_called: str | None = None


def _invoke(call: Callable[..., Any] | None, fn: Callable[..., Any],
            inputs: dict[str, Any]) -> Any:
    return call(fn, inputs) if call is not None else fn(**inputs)


def run_student(ex: Exercise | None, fn: Callable[..., Any], case: Case | None,
                forbidden: Mapping[Any, str], *, inputs: dict[str, Any] | None = None,
                call: Callable[..., Any] | None = None,
                measure: bool | None = None) -> tuple[Any, str | None, str | None, int | None]:
    """Run the student's function on one case.

    Returns ``(plain output, error message, reference hit, largest allocation)``; the last is
    ``None`` unless measured (``measure``, by default when the exercise bounds it).
    """
    if inputs is None:
        assert case is not None
        inputs = case.inputs()
    if ex is not None:
        call = ex.call
        measure = ex.largest_tensor is not None if measure is None else measure
    meter = AllocationMeter() if measure else None

    def go() -> Any:
        if meter is None:
            return _invoke(call, fn, inputs)
        with meter:
            return _invoke(call, fn, inputs)

    largest = None
    try:
        raw, hit = run_guarded(go, forbidden)
    except Exception as err:  # the student's code raised: that is this case's verdict
        return None, f"your function raised {type(err).__name__}: {err}", None, None
    finally:
        largest = None if meter is None else meter.largest
    if hit is not None:
        return None, None, hit, largest
    try:
        return to_plain(raw), None, None, largest
    except AssertionError as err:
        return None, str(err), None, largest


def _post(ex: Exercise, inputs: Mapping[str, Any], plain: Any) -> Any:
    return plain if ex.postprocess is None else to_plain(ex.postprocess(inputs, plain))


def reference_output(ex: Exercise, case: Case, inputs: dict[str, Any] | None = None, *,
                     answer: Any = None) -> Any:
    """course_lib's answer to one case, as plain values (the trusted judge caches it).

    A question's answer is not in course_lib: the caller gives it (``answer``, from the source
    notebook's hidden test), and it comes back checked against the question's choices.

    Raises:
        GradingError: a question without its answer, or an answer given to an exercise that is
            not a question.
    """
    if isinstance(ex, Question):
        return ex.expected(answer)
    if answer is not None or ex.reference is None:
        raise GradingError(f"{ex.id} is not a question: it takes no answer, its reference "
                           "computes it")
    inputs = case.inputs() if inputs is None else inputs
    return _post(ex, inputs, to_plain(ex.run(ex.reference, copy.deepcopy(inputs))))


def explain(ex: Exercise, case: Case, got: Any, expected: Any,
            inputs: dict[str, Any] | None = None) -> str | None:
    """The exercise's own words for a mismatch: the first slip the output equals, or diagnose."""
    inputs = case.inputs() if inputs is None else inputs
    for slip in ex.slips:
        try:
            slipped = _post(ex, inputs, to_plain(ex.run(slip.fn, copy.deepcopy(inputs))))
        except Exception:  # a slip that does not apply to this case says nothing
            continue
        if compare_plain(got, slipped, case.rtol, case.atol) is None:
            return slip.message
    if ex.diagnose is not None:
        try:
            return ex.diagnose(inputs, got, expected)
        except Exception:  # a diagnosis must never break grading
            return None
    return None


def _memory_verdict(ex: Exercise, inputs: Mapping[str, Any], largest: int | None) -> str | None:
    if ex.largest_tensor is None:
        return None
    bound = int(ex.largest_tensor(inputs))
    if largest is None:
        return "the grader could not measure the memory your function used"
    if largest > bound:
        return (f"the output is right, but your function built a tensor of {largest:,} "
                f"elements where the statement allows at most {bound:,} at this size: "
                f"it must not build {ex.too_large}")
    return None


def judge(ex: Exercise, case: Case, got: Any, error: str | None, hit: str | None,
          expected: Any = None, *, largest: int | None = None,
          inputs: dict[str, Any] | None = None, measured_here: bool = True) -> str | None:
    """The verdict on one case: ``None`` when it passes, else the message a student reads.

    The one place that turns an outcome into words, in the kernel and in the trusted judge.

    Args:
        got: the student's plain output (see :func:`to_plain`), or ``None`` after an error.
        error: what the student's code raised, if it raised.
        hit: the exercise whose reference the student's code called, if it did.
        expected: the reference's plain output when the caller has it cached (a question's
            answer, which the caller always gives); computed otherwise.
        largest: the largest allocation measured while the student's function ran (exercises
            with ``largest_tensor``).
        inputs: the case's inputs when the caller has them (built from ``case`` otherwise).
        measured_here: whether ``largest`` was measured by a process the caller trusts (the
            kernel checking itself, in compare mode). The hardened grader's judge passes False:
            a record's size comes from the student's process, and its memory rules are graded
            by :class:`course_lib.grading.exercise.MemoryProbe` instead.
    """
    if hit is not None:
        return REFERENCE_CALL_MESSAGE.format(name=repr(hit))
    if error is not None:
        if STRIPPED_MARKER in error:  # the grading sandbox's copy of course_lib
            return REFERENCE_CALL_MESSAGE.format(name="a graded exercise")
        return error[:2000]
    inputs = case.inputs() if inputs is None else inputs
    if expected is None:
        expected = reference_output(ex, case, inputs)
    if isinstance(ex, Question):  # its own words, which never name the right letter
        return ex.verdict(got, ex.expected(expected))
    try:
        got = _post(ex, inputs, got)
    except Exception as err:  # an output the check cannot read fails the case
        return f"your output could not be checked ({type(err).__name__}: {err})"[:2000]
    msg = compare_plain(got, expected, case.rtol, case.atol)
    if msg:
        extra = explain(ex, case, got, expected, inputs)
        return f"{extra}\n    ({msg})" if extra else msg
    return _memory_verdict(ex, inputs, largest) if measured_here else None
