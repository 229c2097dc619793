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
import re
import time
from collections.abc import Callable
from pathlib import Path

from autograder.chapter_spec import ChapterSpec
from autograder.judge import Judge
from autograder.rebuild import Plan, StudentCell
from autograder.results import CellLog, ExerciseOutcome
from autograder.run.sandbox import Limits, Sandbox, SandboxDied
from course_lib import grading
from course_lib.grading import PROBE_RECORD

MAX_RECORD_FILE = 16 << 20
#: Caps on what a reply may carry into results, feedback and the summary: everything the sandbox
#: sends is hostile data (student code can write on the reply channel).
MAX_OUTPUT_CHARS = 64 * 1024
MAX_ERROR_CHARS = 2000
#: The graded function's code as the runner describes it (the similarity report's, never a grade's).
MAX_FINGERPRINT_CHARS = 64 * 1024
MAX_ORIGIN_CHARS = 500


def _text(value: object, cap: int) -> str:
    """A reply's text field as a string of at most ``cap`` characters (anything else: empty)."""
    if not isinstance(value, str):
        return ""
    if len(value) <= cap:
        return value
    return value[:cap] + f"\n[... {len(value) - cap} characters cut]"


def clean_runtime(reply: dict) -> dict[str, str]:
    """The reply's description of the graded function (``fingerprint``, ``code_origin``): strings
    cut to :data:`MAX_FINGERPRINT_CHARS` and :data:`MAX_ORIGIN_CHARS`, anything else empty.

    Example:
        >>> clean_runtime({"fingerprint": ["x"], "code_origin": "<string>"})
        {'fingerprint': '', 'code_origin': '<string>'}
    """
    fingerprint, origin = reply.get("fingerprint"), reply.get("code_origin")
    return {"fingerprint": fingerprint[:MAX_FINGERPRINT_CHARS] if isinstance(fingerprint, str)
            else "",
            "code_origin": origin[:MAX_ORIGIN_CHARS] if isinstance(origin, str) else ""}


def clean_reply(reply: dict, n_cases: int = 0, probe: bool = False) -> dict:
    """A sandbox reply reduced to typed, capped fields: ``ok``, ``error``, ``output``, ``records``
    (and the graded function's description, :func:`clean_runtime`).

    ``records`` keeps only ``case00.npz`` ... for the exercise's ``n_cases`` cases, each a base64
    string within :data:`MAX_RECORD_FILE` once decoded; everything else is dropped.

    Example:
        >>> clean_reply({"ok": "yes", "error": ["x"], "output": "hi", "records": {
        ...     "case00.npz": "AAAA", "case000001.npz": "AAAA", "../x": "AAAA"}}, n_cases=1)
        {'ok': False, 'error': None, 'output': 'hi', 'records': {'case00.npz': 'AAAA'}, \
'fingerprint': '', 'code_origin': ''}
    """
    error = reply.get("error")
    records = reply.get("records")
    names = {f"case{k:02d}.npz" for k in range(n_cases)} | ({PROBE_RECORD} if probe else set())
    kept = {}
    if isinstance(records, dict):
        for name in sorted(names):
            b64 = records.get(name)
            if isinstance(b64, str) and len(b64) <= MAX_RECORD_FILE * 4 // 3 + 8:
                kept[name] = b64
    return {"ok": reply.get("ok") is True,
            "error": _text(error, MAX_ERROR_CHARS) if isinstance(error, str) else None,
            "output": _text(reply.get("output"), MAX_OUTPUT_CHARS), "records": kept,
            **clean_runtime(reply)}


SandboxFactory = Callable[[Path, int, Limits], Sandbox]


class _Run:
    """One submission's run: the sandbox of the moment, the cells to replay, the deadline."""

    def __init__(self, spec: ChapterSpec, judge: Judge, course_dir: Path, record_root: Path,
                 slot: int, limits: Limits, factory: SandboxFactory) -> None:
        self.spec, self.judge, self.limits = spec, judge, limits
        self.course_dir, self.record_root, self.slot = course_dir, record_root, slot
        self.factory = factory
        self.deadline = time.monotonic() + limits.notebook_timeout
        self.notes: list[str] = []
        self.replay: list[StudentCell] = []
        self.box: Sandbox | None = None
        self.runtime: dict[str, str] = {}  # the last hidden tests' clean_runtime

    def _start(self) -> Sandbox:
        """A fresh sandbox with the setup cells and the cells that ran so far replayed."""
        sb = self.factory(self.course_dir, self.slot, self.limits)
        sb.start()
        for code in self.spec.setup:
            reply = clean_reply(sb.run("cell", code, self.limits.cell_timeout))
            if not reply["ok"]:
                self.notes.append(f"the chapter's setup cell failed in the sandbox: "
                                  f"{reply['error']}")
        for cell in self.replay:
            sb.run("cell", cell.source, self.limits.cell_timeout)
        return sb

    def ensure(self) -> Sandbox:
        """The running sandbox, started again when it died."""
        if self.box is None or self.box.proc is None:
            self.box = self._start()
        return self.box

    def kill(self) -> None:
        """Kill the sandbox, if one runs."""
        if self.box is not None:
            self.box.kill()

    def student_cells(self, res: ExerciseOutcome, cells: list[StudentCell], timeout: float) -> None:
        """Run the exercise's student cells; a cell that kills the kernel is left out."""
        for cell in cells:
            label = f"your cell {cell.index + 1} ({cell.role})"
            try:
                reply = self.ensure().run("cell", cell.source, timeout)
            except SandboxDied as err:
                self.box = None
                what = (f"timed out after {timeout:g} s" if err.timed_out else err.reason)
                res.logs.append(CellLog(label, cell.source, "", what))
                res.notes.append(f"{label}: {what}; the kernel was restarted and this cell "
                                 "left out")
                continue
            self.replay.append(cell)
            reply = clean_reply(reply)
            res.logs.append(CellLog(label, cell.source, reply["output"], reply["error"]))

    def visible_tests(self, res: ExerciseOutcome, code: str, eid: str,
                      timeout: float) -> str | None:
        """Run the source's visible tests; their error (``None`` when they passed)."""
        try:
            reply = clean_reply(self.ensure().run("test", code, timeout, exercise=eid,
                                                  hidden=False))
            error = None if reply["ok"] else (reply["error"] or "failed")
            res.logs.append(CellLog("visible tests", code, reply["output"], error))
        except (SandboxDied, OSError) as err:
            self.box = None
            error = getattr(err, "reason", str(err))
            res.logs.append(CellLog("visible tests", code, "", error))
        return error

    def hidden_tests(self, code: str, eid: str, timeout: float) -> tuple[str | None, dict]:
        """Run the hidden part in record mode: ``(its error or None, the case records)``."""
        n_cases = len(self.judge.cases(eid))
        self.runtime = {}
        function = next((e.function for e in self.spec.exercises if e.exercise_id == eid), "")
        try:
            reply = clean_reply(self.ensure().run("test", code, timeout, exercise=eid,
                                                  hidden=True, cases=n_cases,
                                                  function=function), n_cases)
            self.runtime = clean_runtime(reply)
            return (None if reply["ok"] else reply["error"]), reply["records"]
        except (SandboxDied, OSError) as err:
            self.box = None
            if getattr(err, "timed_out", False):
                return f"the hidden tests timed out after {timeout:g} s", {}
            return getattr(err, "reason", str(err)), {}

    def save_records(self, eid: str, records: dict) -> None:
        """Write the exercise's case records (``clean_reply`` kept its names only) for the judge."""
        folder = self.record_root / eid
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*"):
            old.unlink()
        for name, b64 in records.items():
            try:
                data = base64.b64decode(b64, validate=True)
            except ValueError:  # not base64: that case has no result, nothing more
                continue
            (folder / name).write_bytes(data)

    def exercise(self, res: ExerciseOutcome, cells: list[StudentCell]) -> None:
        """Run and judge one exercise into ``res``."""
        eid = res.exercise_id
        ex = next(e for e in self.spec.exercises if e.exercise_id == eid)
        left = self.deadline - time.monotonic()
        if left <= 0:
            res.status = "error"
            res.messages.append(f"not run: the submission used up its "
                                f"{self.limits.notebook_timeout:g} s time limit")
            return
        timeout = min(self.limits.cell_timeout, left)
        try:
            self.ensure()
        except SandboxDied as err:
            res.status = "error"
            res.messages.append(f"the sandbox could not start: {err.reason}")
            self.box = None
            return
        self.student_cells(res, cells, timeout)
        visible_error = self.visible_tests(res, ex.visible_test, eid, timeout)
        hidden_error, records = self.hidden_tests(ex.hidden_test, eid, timeout)
        res.fingerprint = self.runtime.get("fingerprint", "")
        res.code_origin = self.runtime.get("code_origin", "")
        self.save_records(eid, records)
        verdict = self.judge.judge(eid, self.record_root, hidden_error)
        res.messages.extend(verdict.messages)
        passed = verdict.passed
        if passed and grading.get_exercise(eid).memory_probe is not None:
            probe_message = self.memory_probe(res, cells, eid, ex.function)
            if probe_message is not None:
                passed = False
                res.messages.append(probe_message)
        if passed and visible_error is None:
            res.points, res.status = ex.points, "passed"
        elif passed:
            res.messages.append(f"the visible tests failed: {visible_error}")
        if hidden_error and not verdict.passed and not verdict.messages:
            res.messages.append(hidden_error)
        missing = unavailable_imports(res)
        if missing and res.points == 0:
            res.messages.insert(0, f"your code imports {', '.join(missing)}, which the grading "
                                "environment does not hold: it holds what the statement allows "
                                "(torch, numpy and Python's standard library), nothing else")

    def memory_probe(self, res: ExerciseOutcome, cells: list[StudentCell], eid: str,
                     function: str) -> str | None:
        """The exercise's memory rule, graded from outside the student's process.

        A fresh sandbox runs the setup cell and loads the probe's inputs (no student code has run
        yet); the driver measures what the sandbox holds and limits it, itself, to that plus the
        probe's budget (:meth:`Sandbox.limit_memory`: the cgroup and every process's address
        space); then the exercise's own cells run and the function is called once on the probe.
        The judge compares the output with the reference; running out of memory fails.
        """
        probe = grading.get_exercise(eid).memory_probe
        assert probe is not None
        self.kill()
        self.box = None
        slack = PROBE_SLACK_BYTES
        try:
            box = self.factory(self.course_dir, self.slot, self.limits)
            box.start()
            self.box = box
            for code in self.spec.setup:
                box.run("cell", code, self.limits.cell_timeout)
            load = clean_reply(box.run("test", f"from course_lib import grading as _g\n"
                                              f"_g.load_probe({eid!r})\n", self.limits.cell_timeout,
                                       exercise=eid, hidden=False))
            if not load["ok"]:
                return f"the memory probe could not be prepared: {load['error']}"
            baseline = box.memory_in_use()
            limited = box.limit_memory(probe.budget_bytes + slack, baseline)
            if not limited:  # no prlimit from here (no CAP_SYS_RESOURCE): the runner, before
                limited = box.limit_memory_from_runner(  # any student code, lowers its own
                    probe.budget_bytes + slack, self.limits.cell_timeout)
            if not limited:
                return ("the grader could not limit the sandbox's memory here, so the memory rule "
                        "could not be graded (ask your instructor)")
            for cell in cells:
                box.run("cell", cell.source, self.limits.cell_timeout)
            reply = clean_reply(box.run("test", f"from course_lib import grading as _g\n"
                                                f"_g.record_probe({eid!r}, {function})\n",
                                        self.limits.cell_timeout, exercise=eid, hidden=True,
                                        cases=0, probe=True), probe=True)
            died = None
            self.save_records(eid, reply["records"])
        except SandboxDied as err:
            died = "timed out" if err.timed_out else err.reason
            if err.timed_out:
                return (f"on a large case ({probe.name}) your function did not finish within "
                        f"{self.limits.cell_timeout:g} s")
            self.save_records(eid, {})
        finally:
            self.kill()  # its memory limit must not outlive the probe
            self.box = None
        res.notes.append(f"memory rule checked on a large case ({probe.name}) under a limit "
                         f"of {probe.budget_bytes / (1 << 20):,.0f} MiB beyond its inputs")
        return self.judge.judge_probe(eid, self.record_root, died)


#: Room the memory probe leaves beyond its budget for the interpreter's own allocations.
PROBE_SLACK_BYTES = 48 << 20


def unavailable_imports(res: ExerciseOutcome) -> list[str]:
    """The modules an exercise's cells or tests failed to import (``No module named 'x'``),
    from the errors of its cells and the judge's messages."""
    texts = [log.error or "" for log in res.logs] + list(res.messages)
    found: list[str] = []
    for text in texts:
        for name in re.findall(r"No module named '([\w.]+)'", text):
            if name not in found:
                found.append(name)
    return found


def run_submission(spec: ChapterSpec, plan: Plan, judge: Judge, course_dir: Path,
                   record_root: Path, slot: int, limits: Limits,
                   sandbox_factory: SandboxFactory = Sandbox,
                   ) -> tuple[dict[str, ExerciseOutcome], list[str]]:
    """Grade one planned submission; return the per-exercise outcomes and general notes.

    Args:
        spec: the chapter's exercises.
        plan: what to run (:func:`autograder.rebuild.plan_submission`).
        judge: the trusted judge holding this run's hidden inputs.
        course_dir: the sandbox's course_lib and hidden inputs.
        record_root: where each exercise's case records are written for the judge.
        slot: the sandbox slot (its uid and cgroup).
        limits: time and memory limits.
        sandbox_factory: makes each sandbox (default :class:`Sandbox`; the platform runners
            pass their no-namespace fallback, :mod:`autograder.platform_common`).

    Returns:
        ``(exercise id -> outcome, notes on the whole submission)``; the exercises with nothing
        to run come first, then the others in the order they ran.
    """
    points = {ex.exercise_id: ex.points for ex in spec.exercises}
    results: dict[str, ExerciseOutcome] = {}
    run = _Run(spec, judge, course_dir, record_root, slot, limits, sandbox_factory)
    try:
        for eid, why in plan.missing.items():
            results[eid] = ExerciseOutcome(eid, 0.0, points[eid], "failed", [why],
                                           list(plan.exercise_notes.get(eid, [])))
        for eid in plan.order:
            results[eid] = ExerciseOutcome(eid, 0.0, points[eid], "failed",
                                           notes=list(plan.exercise_notes.get(eid, [])))
            run.exercise(results[eid], plan.groups[eid])
    finally:
        run.kill()
    return results, run.notes
