"""The hardened engine: one sandbox per submission, exercises one after another, judged outside.

For each exercise, in the student's order: the student's cells of that exercise (solution and
helpers), then the source's visible test, then its hidden part (``grading.check`` in record
mode). A crash, a time-out or a kernel death costs the exercise during which it happened: the
sandbox is started again, the setup cell and the student's earlier cells that ran without killing
the kernel are replayed, and the next exercise runs. The verdict of each exercise is the trusted
judge's, from the records alone; a failing visible test also fails the exercise.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.chapter_spec import ChapterSpec
from autograder.judge import Judge
from autograder.rebuild import Plan, StudentCell
from autograder.sandbox import Limits, Sandbox, SandboxDied

MAX_RECORD_FILE = 16 << 20


@dataclass
class CellLog:
    """What one student cell or test did, for the feedback."""

    label: str
    source: str  # shown in feedback; empty for the hidden part
    output: str
    error: str | None


@dataclass
class ExerciseResult:
    exercise_id: str
    points: float
    max_points: float
    status: str  # "passed", "failed", "error"
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: list[CellLog] = field(default_factory=list)


def run_submission(spec: ChapterSpec, plan: Plan, judge: Judge, course_dir: Path,
                   record_root: Path, slot: int, limits: Limits) -> tuple[dict[str, ExerciseResult], list[str]]:
    """Grade one planned submission; return the per-exercise results and general notes."""
    deadline = time.monotonic() + limits.notebook_timeout
    results: dict[str, ExerciseResult] = {}
    notes: list[str] = []
    replay: list[StudentCell] = []
    box: Sandbox | None = None
    exercises = {ex.exercise_id: ex for ex in spec.exercises}

    def start() -> Sandbox:
        sb = Sandbox(course_dir, slot, limits)
        sb.start()
        for code in spec.setup:
            reply = sb.run("cell", code, limits.cell_timeout)
            if not reply.get("ok"):
                notes.append(f"the chapter's setup cell failed in the sandbox: {reply.get('error')}")
        for cell in replay:
            sb.run("cell", cell.source, limits.cell_timeout)
        return sb

    try:
        for eid, why in plan.missing.items():
            ex = exercises[eid]
            results[eid] = ExerciseResult(eid, 0.0, ex.points, "failed", [why],
                                          list(plan.exercise_notes.get(eid, [])))
        for eid in plan.order:
            ex = exercises[eid]
            res = ExerciseResult(eid, 0.0, ex.points, "failed",
                                 notes=list(plan.exercise_notes.get(eid, [])))
            results[eid] = res
            left = deadline - time.monotonic()
            if left <= 0:
                res.status = "error"
                res.messages.append(f"not run: the submission used up its "
                                    f"{limits.notebook_timeout:g} s time limit")
                continue
            timeout = min(limits.cell_timeout, left)

            def ensure() -> Sandbox:
                nonlocal box
                if box is None or box.proc is None:
                    box = start()
                return box

            try:
                ensure()
            except SandboxDied as err:
                res.status = "error"
                res.messages.append(f"the sandbox could not start: {err.reason}")
                box = None
                continue
            for cell in plan.groups[eid]:
                label = f"your cell {cell.index + 1} ({cell.role})"
                try:
                    reply = ensure().run("cell", cell.source, timeout)
                except SandboxDied as err:
                    box = None
                    what = (f"timed out after {timeout:g} s" if err.timed_out else err.reason)
                    res.logs.append(CellLog(label, cell.source, "", what))
                    res.notes.append(f"{label}: {what}; the kernel was restarted and this cell "
                                     "left out")
                    continue
                replay.append(cell)
                res.logs.append(CellLog(label, cell.source, str(reply.get("output", ""))[:65536],
                                        reply.get("error")))
            visible_error = None
            try:
                reply = ensure().run("test", ex.visible_test, timeout, exercise=eid, hidden=False)
                visible_error = None if reply.get("ok") else (reply.get("error") or "failed")
                res.logs.append(CellLog("visible tests", ex.visible_test,
                                        str(reply.get("output", ""))[:65536], visible_error))
            except (SandboxDied, OSError) as err:
                box = None
                visible_error = getattr(err, "reason", str(err))
                res.logs.append(CellLog("visible tests", ex.visible_test, "", visible_error))
            hidden_error = None
            records: dict = {}
            try:
                reply = ensure().run("test", ex.hidden_test, timeout, exercise=eid, hidden=True)
                hidden_error = None if reply.get("ok") else reply.get("error")
                records = reply.get("records") or {}
            except (SandboxDied, OSError) as err:
                box = None
                hidden_error = getattr(err, "reason", str(err))
                if getattr(err, "timed_out", False):
                    hidden_error = f"the hidden tests timed out after {timeout:g} s"
            folder = record_root / eid
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*"):
                old.unlink()
            if isinstance(records, dict):
                for name, b64 in records.items():
                    if (isinstance(name, str) and isinstance(b64, str)
                            and len(b64) < MAX_RECORD_FILE * 4 // 3 + 8
                            and name.startswith("case") and name.endswith(".npz")
                            and "/" not in name and name[4:-4].isdigit()):
                        try:
                            data = base64.b64decode(b64, validate=True)
                        except ValueError:  # not base64: that case has no result, nothing more
                            continue
                        (folder / name).write_bytes(data)
            verdict = judge.judge(eid, record_root, hidden_error)
            res.messages.extend(verdict.messages)
            if verdict.passed and visible_error is None:
                res.points, res.status = ex.points, "passed"
            elif verdict.passed:
                res.messages.append(f"the visible tests failed: {visible_error}")
            if hidden_error and not verdict.passed and not verdict.messages:
                res.messages.append(hidden_error)
    finally:
        if box is not None:
            box.kill()
    return results, notes
