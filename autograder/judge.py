"""The trusted judge: reference outputs computed here, student records compared here.

This process never runs student code. It reads the plain records a sandbox produced
(``.npz``, ``allow_pickle=False``, size-checked before loading), rebuilds each hidden case's inputs
from its seed, computes course_lib's reference output once per case (cached for the whole batch)
and compares with :func:`course_lib.grading.compare_plain`, exactly as
:func:`course_lib.grading.judge` does.
"""

from __future__ import annotations

import threading
import zipfile
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
    """Reference outputs of a chapter's hidden cases, computed lazily once, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: dict[tuple[str, int], Any] = {}
        self._cases: dict[str, list[grading.Case]] = {}

    def cases(self, exercise_id: str) -> list[grading.Case]:
        with self._lock:
            if exercise_id not in self._cases:
                self._cases[exercise_id] = list(grading.get_exercise(exercise_id).cases())
            return self._cases[exercise_id]

    def expected(self, exercise_id: str, k: int) -> Any:
        with self._lock:
            key = (exercise_id, k)
            if key not in self._expected:
                ex = grading.get_exercise(exercise_id)
                case = list(ex.cases())[k]
                self._expected[key] = grading.to_plain(ex.run(ex.reference, case.inputs()))
            return self._expected[key]

    def judge_case(self, exercise_id: str, k: int, record: dict[str, Any]) -> str | None:
        ex = grading.get_exercise(exercise_id)
        case = self.cases(exercise_id)[k]
        if record.get("reference_called"):
            return (f"your solution calls course_lib's implementation of "
                    f"{record['reference_called']!r}; graded exercises must be solved with your "
                    "own code (torch operations are fine)")
        if record.get("error"):
            error = str(record["error"])
            if "is not available while grading" in error:  # the sandbox's stripped reference
                return ("your solution calls course_lib's implementation of a graded exercise of "
                        "this chapter; graded exercises must be solved with your own code (torch "
                        "operations are fine)")
            return error[:2000]
        expected = self.expected(exercise_id, k)
        msg = grading.compare_plain(record.get("output"), expected, case.rtol, case.atol)
        if msg and ex.diagnose is not None:
            try:
                extra = ex.diagnose(case.inputs(), record.get("output"), expected)
            except Exception:  # noqa: BLE001 - a diagnosis must never break grading
                extra = None
            if extra:
                msg = f"{extra}\n    ({msg})"
        return msg

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
            msg = self.judge_case(exercise_id, k, record)
            if msg is None:
                passed += 1
            elif record.get("reference_called") or msg.startswith("your solution calls"):
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
