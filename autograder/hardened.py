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
#: Caps on what a reply may carry into results, feedback and the summary: everything the sandbox
#: sends is hostile data (student code can write on the reply channel).
MAX_OUTPUT_CHARS = 64 * 1024
MAX_ERROR_CHARS = 2000


def _text(value: object, cap: int) -> str:
    """A reply's text field as a string of at most ``cap`` characters (anything else: empty)."""
    if not isinstance(value, str):
        return ""
    return value if len(value) <= cap else value[:cap] + f"\n[... {len(value) - cap} characters cut]"


def clean_reply(reply: dict, n_cases: int = 0) -> dict:
    """A sandbox reply reduced to typed, capped fields: ``ok``, ``error``, ``output``, ``records``.

    ``records`` keeps only ``case00.npz`` ... for the exercise's ``n_cases`` cases, each a base64
    string within :data:`MAX_RECORD_FILE` once decoded; everything else is dropped.

    Example:
        >>> clean_reply({"ok": "yes", "error": ["x"], "output": "hi", "records": {
        ...     "case00.npz": "AAAA", "case000001.npz": "AAAA", "../x": "AAAA"}}, n_cases=1)
        {'ok': False, 'error': None, 'output': 'hi', 'records': {'case00.npz': 'AAAA'}}
    """
    error = reply.get("error")
    records = reply.get("records")
    names = {f"case{k:02d}.npz" for k in range(n_cases)}
    kept = {}
    if isinstance(records, dict):
        for name in sorted(names):
            b64 = records.get(name)
            if isinstance(b64, str) and len(b64) <= MAX_RECORD_FILE * 4 // 3 + 8:
                kept[name] = b64
    return {"ok": reply.get("ok") is True,
            "error": _text(error, MAX_ERROR_CHARS) if isinstance(error, str) else None,
            "output": _text(reply.get("output"), MAX_OUTPUT_CHARS), "records": kept}


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
                   record_root: Path, slot: int, limits: Limits, sandbox_factory=Sandbox,
                   ) -> tuple[dict[str, ExerciseResult], list[str]]:
    """Grade one planned submission; return the per-exercise results and general notes.

    ``sandbox_factory(course_dir, slot, limits)`` makes each sandbox (default :class:`Sandbox`;
    the platform runners pass their no-namespace fallback, :mod:`autograder.platform_common`).
    """
    deadline = time.monotonic() + limits.notebook_timeout
    results: dict[str, ExerciseResult] = {}
    notes: list[str] = []
    replay: list[StudentCell] = []
    box: Sandbox | None = None
    exercises = {ex.exercise_id: ex for ex in spec.exercises}

    def start() -> Sandbox:
        sb = sandbox_factory(course_dir, slot, limits)
        sb.start()
        for code in spec.setup:
            reply = sb.run("cell", code, limits.cell_timeout)
            reply = clean_reply(reply)
            if not reply["ok"]:
                notes.append(f"the chapter's setup cell failed in the sandbox: {reply['error']}")
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
                reply = clean_reply(reply)
                res.logs.append(CellLog(label, cell.source, reply["output"], reply["error"]))
            visible_error = None
            try:
                reply = clean_reply(ensure().run("test", ex.visible_test, timeout, exercise=eid,
                                                 hidden=False))
                visible_error = None if reply["ok"] else (reply["error"] or "failed")
                res.logs.append(CellLog("visible tests", ex.visible_test, reply["output"],
                                        visible_error))
            except (SandboxDied, OSError) as err:
                box = None
                visible_error = getattr(err, "reason", str(err))
                res.logs.append(CellLog("visible tests", ex.visible_test, "", visible_error))
            hidden_error = None
            records: dict = {}
            n_cases = len(judge.cases(eid))
            try:
                reply = clean_reply(ensure().run("test", ex.hidden_test, timeout, exercise=eid,
                                                 hidden=True, cases=n_cases), n_cases)
                hidden_error = None if reply["ok"] else reply["error"]
                records = reply["records"]
            except (SandboxDied, OSError) as err:
                box = None
                hidden_error = getattr(err, "reason", str(err))
                if getattr(err, "timed_out", False):
                    hidden_error = f"the hidden tests timed out after {timeout:g} s"
            folder = record_root / eid
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*"):
                old.unlink()
            for name, b64 in records.items():  # clean_reply kept the exercise's names only
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
