"""The hidden tests' entry point: :func:`check`, the one call of every hidden test cell.

``check`` looks the exercise up in the registry, runs the student's function on every hidden
case and then, by mode (:mod:`course_lib.grading.modes`):

* ``compare``: judges each case in this kernel (:func:`evaluate`) and raises ``AssertionError``
  with a message that says what is wrong, never the hidden inputs;
* ``record``: runs the function on the inputs the trusted process wrote and only records its
  outputs (:func:`record`); the trusted judge, which runs no student code, compares them.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from course_lib.grading.exercise import GradingError, ReferenceCallError
from course_lib.grading.inputs import read_case_inputs, read_probe_inputs, resolve_call
from course_lib.grading.modes import INPUT_DIR_ENV, MODE_ENV, RECORD_DIR_ENV, grading_mode
from course_lib.grading.questions import Question
from course_lib.grading.records import record_path, save_record
from course_lib.grading.registry import forbidden_code_objects, get_exercise
from course_lib.grading.verdict import CaseResult, judge, reference_output, run_student


def evaluate(exercise_id: str, fn: Callable[..., Any], answer: Any = None) -> list[CaseResult]:
    """Run and judge every hidden case in this process (compare mode).

    Args:
        exercise_id: the exercise, e.g. ``"seq2seq.masked_softmax"``.
        fn: the student's function.
        answer: a question's answer (its hidden test gives it); ``None`` for other exercises.
    """
    ex = get_exercise(exercise_id)
    forbidden = forbidden_code_objects(ex.chapter, ex)
    cases = ex.cases()
    fixed = reference_output(ex, cases[0], answer=answer) if isinstance(ex, Question) else None
    if answer is not None and fixed is None:
        raise GradingError(f"{exercise_id} is not a question: it takes no answer")
    results = []
    for k, case in enumerate(cases):
        inputs = case.inputs()
        got, error, hit, largest = run_student(ex, fn, case, forbidden,
                                               inputs=copy.deepcopy(inputs))
        results.append(CaseResult(k, case.name, judge(ex, case, got, error, hit, fixed,
                                                      largest=largest, inputs=inputs), hit))
    return results


def record(exercise_id: str, fn: Callable[..., Any], root: Path) -> None:
    """Run every hidden case on the grader's inputs and write the outcomes under ``root``."""
    folder = os.environ.get(INPUT_DIR_ENV)
    if not folder:
        raise GradingError(f"{MODE_ENV}=record needs {INPUT_DIR_ENV} (the grader's inputs)")
    bundle = read_case_inputs(Path(folder), exercise_id)
    call = resolve_call(bundle["call"])
    try:  # the guard where the exercise modules exist; the sandbox has none (bodies stripped)
        forbidden = forbidden_code_objects(exercise_id.split(".", 1)[0],
                                           get_exercise(exercise_id))
    except GradingError:
        forbidden = {}
    for k, inputs in enumerate(bundle["cases"]):
        # No meter here: a size measured in the student's process is never trusted, and the
        # hardened grader grades memory rules with a probe it limits from outside.
        got, error, hit, _ = run_student(None, fn, None, forbidden,
                                         inputs=copy.deepcopy(inputs), call=call, measure=False)
        save_record(record_path(root, exercise_id, k), output=got, error=error,
                    reference_called=hit)


#: The record of an exercise's memory probe, beside its cases' (``record_dir/<id>/probe.npz``).
PROBE_RECORD = "probe.npz"


_PROBES: dict[str, dict[str, Any]] = {}


def load_probe(exercise_id: str) -> None:
    """Load the exercise's memory probe inputs into this process (record mode only).

    The hardened grader sends this call in a fresh sandbox right after the setup cell, before
    any student code runs, then measures the memory the sandbox holds and limits it from outside
    to that plus the probe's budget; a small warm-up makes torch allocate its lazily created
    buffers now rather than inside the budget.
    """
    import torch

    folder = os.environ.get(INPUT_DIR_ENV)
    if grading_mode() != "record" or not folder:
        raise GradingError("a memory probe runs only under the hardened grader")
    _PROBES[exercise_id] = read_probe_inputs(Path(folder), exercise_id)
    x = torch.ones(8, 8)
    (x @ x.T).softmax(-1).cumsum(-1).sum().item()
    torch.ones(8, 8, dtype=torch.float64).cumsum(-1).sum().item()


def record_probe(exercise_id: str, fn: Callable[..., Any]) -> None:
    """Run ``fn`` on the exercise's memory probe (:func:`load_probe`) and record its output.

    Nothing is measured here: the sandbox runs under a memory limit the grader set from outside
    (:class:`course_lib.grading.exercise.MemoryProbe`).
    """
    root = os.environ.get(RECORD_DIR_ENV)
    if grading_mode() != "record" or not root or exercise_id not in _PROBES:
        raise GradingError("a memory probe runs only under the hardened grader")
    if not callable(fn):
        raise AssertionError(f"{exercise_id}: expected a function, got {type(fn).__name__}")
    bundle = _PROBES.pop(exercise_id)
    got, error, _, _ = run_student(None, fn, None, {}, inputs=bundle["inputs"],
                                   call=resolve_call(bundle["call"]), measure=False)
    del bundle
    out = Path(root) / exercise_id / PROBE_RECORD
    if out.exists():
        out.unlink()
    save_record(out, output=got, error=error)


def format_failures(exercise_id: str, results: Sequence[CaseResult]) -> str | None:
    """One message for all failed cases, or ``None`` when every case passed.

    Example:
        >>> print(format_failures("toy.f", [CaseResult(0, "float32"),
        ...                                 CaseResult(1, "float64", "wrong shape")]))
        toy.f: 1 of 2 hidden test cases failed.
          case 2 (float64): wrong shape
    """
    failed = [r for r in results if r.message]
    if not failed:
        return None
    if any(r.reference_called for r in failed):
        return next(r.message for r in failed if r.reference_called and r.message)
    lines = [f"{exercise_id}: {len(failed)} of {len(results)} hidden test cases failed."]
    for r in failed:
        lines.append(f"  case {r.index + 1} ({r.name}): {r.message}")
    return "\n".join(lines)


def check(exercise_id: str, fn: Callable[..., Any], answer: Any = None) -> None:
    """Run the hidden tests of one exercise on the student's function ``fn``.

    In compare mode raises ``AssertionError`` listing the failed cases (what is wrong, never the
    hidden inputs); in record mode writes the outputs for the trusted grader and returns.

    A hidden test cell is one call; a question's gives its answer too, which only compare mode
    uses (under the hardened grader the trusted judge reads it from the source notebook)::

        grading.check("seq2seq.additive_score", additive_score)
        grading.check("<chapter>.<question>", <question>, answer="<letter>")
    """
    if not callable(fn):
        raise AssertionError(f"{exercise_id}: expected a function, got {type(fn).__name__}")
    if grading_mode() == "record":
        root = os.environ.get(RECORD_DIR_ENV)
        if not root:
            raise GradingError(f"{MODE_ENV}=record needs {RECORD_DIR_ENV}")
        record(exercise_id, fn, Path(root))
        return
    results = evaluate(exercise_id, fn, answer)
    message = format_failures(exercise_id, results)
    if message:
        if any(r.reference_called for r in results):
            raise ReferenceCallError(message)
        raise AssertionError(message)
    print(f"{exercise_id}: all hidden test cases passed.")
