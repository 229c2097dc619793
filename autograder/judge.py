"""The trusted judge: reference outputs computed here, student records compared here.

This process never runs student code. It builds each hidden case's inputs once per grading run
(the run's secret is mixed into every seed, so nobody can know them in advance) and writes them for
the sandboxes (:meth:`Judge.write_inputs`); it reads the plain records a sandbox produced (``.npz``,
``allow_pickle=False``, size-checked before loading), computes course_lib's reference output on the
very same inputs once per case (cached for the whole batch) and hands each case to
:func:`course_lib.grading.judge`, the one place that turns an outcome into the message a student
reads.
"""

from __future__ import annotations

import copy
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_lib import grading

MAX_RECORD_BYTES = 256 << 20  # uncompressed, per record file


@dataclass
class ExerciseVerdict:
    """The judge's decision on one exercise."""

    passed: bool
    cases_passed: int
    cases_total: int
    messages: list[str]


class Judge:
    """Reference outputs of a chapter's hidden cases, computed lazily once, thread-safe.

    One lock per exercise: workers judging different exercises compute their references in
    parallel, and a reference is computed once however many workers ask for it. A question's
    reference output is its answer, given here (``answers``, from the source notebook).
    """

    def __init__(self, answers: Mapping[str, str] | None = None) -> None:
        # The questions' answers, from the source notebook (ChapterSpec.answers): never from
        # anything a sandbox sends.
        self._answers = dict(answers or {})
        self._lock = threading.Lock()  # guards the two dicts below, held only briefly
        self._locks: dict[str, threading.Lock] = {}
        self._expected: dict[tuple[str, int], Any] = {}
        self._cases: dict[str, list[grading.Case]] = {}
        self._inputs: dict[str, list[dict[str, Any]]] = {}
        self._probe_inputs: dict[str, dict[str, Any]] = {}

    def _exercise_lock(self, exercise_id: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(exercise_id, threading.Lock())

    def cases(self, exercise_id: str) -> list[grading.Case]:
        with self._exercise_lock(exercise_id):
            if exercise_id not in self._cases:
                self._cases[exercise_id] = list(grading.get_exercise(exercise_id).cases())
            return self._cases[exercise_id]

    def inputs(self, exercise_id: str) -> list[dict[str, Any]]:
        """The inputs of every hidden case, built once (the sandboxes get exactly these)."""
        cases = self.cases(exercise_id)
        with self._exercise_lock(exercise_id):
            if exercise_id not in self._inputs:
                self._inputs[exercise_id] = [case.inputs() for case in cases]
            return self._inputs[exercise_id]

    def write_inputs(self, folder: Path, exercise_ids: list[str]) -> None:
        """Write the hidden inputs of ``exercise_ids`` (and their memory probes' inputs) where
        the sandboxes read them."""
        for exercise_id in exercise_ids:
            ex = grading.get_exercise(exercise_id)
            grading.write_case_inputs(ex, folder, self.inputs(exercise_id))
            if ex.memory_probe is not None:
                grading.write_probe_inputs(ex, folder, self.probe_inputs(exercise_id))

    def probe_inputs(self, exercise_id: str) -> dict[str, Any]:
        """The inputs of the exercise's memory probe, built once (under the run's secret)."""
        probe = grading.get_exercise(exercise_id).memory_probe
        if probe is None:
            raise grading.GradingError(f"{exercise_id} has no memory probe")
        with self._exercise_lock(exercise_id):
            if exercise_id not in self._probe_inputs:
                self._probe_inputs[exercise_id] = probe.inputs()
            return self._probe_inputs[exercise_id]

    def probe_input_bytes(self, exercise_id: str) -> int:
        """Bytes of the probe's input tensors (what the sandbox holds before the function runs)."""
        import torch

        total = 0
        for value in self.probe_inputs(exercise_id).values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
        return total

    def judge_probe(self, exercise_id: str, record_dir: Path, died: str | None) -> str | None:
        """The verdict on the memory probe: None when it passed, else the student's message.

        Args:
            exercise_id: the exercise.
            record_dir: where the sandbox's ``<id>/probe.npz`` was written.
            died: why the sandbox ended during the probe (out of memory, most often), if it did.
        """
        ex = grading.get_exercise(exercise_id)
        probe = ex.memory_probe
        assert probe is not None
        limit = f"{probe.budget_bytes / (1 << 20):,.0f} MiB"
        over = (f"on a large case ({probe.name}) your function needed more memory than the "
                f"{limit} the statement allows beyond its inputs: it must not build "
                f"{ex.too_large}")
        path = record_dir / exercise_id / grading.PROBE_RECORD
        if died is not None or not path.exists():
            return over if died is None or "memory" in died or "signal" in died else (
                f"on a large case ({probe.name}): {died}")
        try:
            record = load_record_safely(path)
        except Exception as err:  # noqa: BLE001 - a bad record fails the probe, nothing more
            return f"on a large case ({probe.name}): unreadable result ({err})"
        error = record.get("error")
        if error is not None:
            text = str(error)[:2000]
            if any(w in text for w in ("MemoryError", "not enough memory", "can't allocate",
                                       "Cannot allocate memory", "out of memory")):
                return over
            return f"on a large case ({probe.name}): {text}"
        case = probe.case()
        inputs = self.probe_inputs(exercise_id)
        with self._exercise_lock(exercise_id):
            key = (exercise_id, -1)
            if key not in self._expected:
                self._expected[key] = grading.reference_output(ex, case, copy.deepcopy(inputs))
            expected = self._expected[key]
        msg = grading.judge(ex, case, record.get("output"), None, None, expected,
                            inputs=inputs, measured_here=False)
        return None if msg is None else f"on a large case ({probe.name}): {msg}"

    def expected(self, exercise_id: str, k: int) -> Any:
        case = self.cases(exercise_id)[k]  # takes (and releases) the exercise's lock itself
        inputs = self.inputs(exercise_id)[k]
        with self._exercise_lock(exercise_id):
            key = (exercise_id, k)
            if key not in self._expected:
                ex = grading.get_exercise(exercise_id)
                self._expected[key] = grading.reference_output(
                    ex, case, copy.deepcopy(inputs), answer=self._answers.get(exercise_id))
            return self._expected[key]

    def judge_case(self, exercise_id: str, k: int, record: dict[str, Any]) -> str | None:
        """The verdict on one case, in course_lib.grading's words (the one verdict path)."""
        ex = grading.get_exercise(exercise_id)
        case = self.cases(exercise_id)[k]
        got, error, hit = record.get("output"), record.get("error"), record.get("reference_called")
        if error is not None:
            error = str(error)[:2000]
        if hit is not None:
            hit = str(hit)[:200]
        expected = None if (hit or error) else self.expected(exercise_id, k)
        inputs = copy.deepcopy(self.inputs(exercise_id)[k])
        # A record's "largest" (the in-kernel meter's) is written by the student's process: never
        # trusted. Memory rules are graded by the memory probe, limited from outside.
        return grading.judge(ex, case, got, error, hit, expected, inputs=inputs,
                             measured_here=False)

    def judge(self, exercise_id: str, record_dir: Path, ran_error: str | None) -> ExerciseVerdict:
        """Judge every hidden case of an exercise from the records in ``record_dir``."""
        cases = self.cases(exercise_id)
        messages = []
        passed = 0
        for k, case in enumerate(cases):
            path = grading.record_path(record_dir, exercise_id, k)
            if not path.exists():
                why = ran_error or "the hidden tests did not produce a result for this case"
                messages.append(f"case {k + 1} ({case.name}): not run: {why}")
                continue
            try:
                record = load_record_safely(path)
            except Exception as err:  # noqa: BLE001 - a bad record fails its case, nothing more
                messages.append(f"case {k + 1} ({case.name}): unreadable result ({err})")
                continue
            try:
                msg = self.judge_case(exercise_id, k, record)
            except Exception as err:  # noqa: BLE001 - a hostile record fails its case only
                msg = f"the result could not be judged ({type(err).__name__})"
            if msg is None:
                passed += 1
            elif grading.is_reference_call(msg):
                messages.append(msg)
            else:
                messages.append(f"case {k + 1} ({case.name}): {msg}")
        return ExerciseVerdict(passed == len(cases), passed, len(cases), _dedupe(messages))


def _dedupe(messages: list[str]) -> list[str]:
    out: list[str] = []
    for m in messages:
        if m not in out:
            out.append(m)
    return out


def load_record_safely(path: Path) -> dict[str, Any]:
    """:func:`course_lib.grading.load_record` after checking the archive is small and plain."""
    with zipfile.ZipFile(path) as z:
        total = sum(info.file_size for info in z.infolist())
        if total > MAX_RECORD_BYTES:
            raise ValueError(f"result of {total} bytes is larger than the grader accepts")
        if any(not info.filename.endswith(".npy") for info in z.infolist()):
            raise ValueError("result holds something other than arrays")
    return grading.load_record(path)
