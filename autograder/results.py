"""The typed results the grading stages pass to each other, and their JSON form (the cache).

* :class:`Submission`: a student's file after ingest (read and validated, or why not);
* :class:`CellLog`: what one cell the grader ran printed or raised, for the feedback;
* :class:`ExerciseOutcome`: one exercise's points, status, the judge's messages and the logs;
* :class:`GradeResult`: one student's whole result, written to ``results/<student>.json`` and
  read back from there as the cache (the file's layout is :meth:`GradeResult.to_json`'s);
* :class:`FileRow`: one line of ``report.csv``: a file found, whom it was mapped to, its fate.

Example:
    >>> r = GradeResult.new("s1", "s1/seq2seq.ipynb", "ab", "cd", "hardened", 3.0)
    >>> r.exercises["seq2seq.f"] = ExerciseOutcome("seq2seq.f", 2.0, 3.0, "failed", ["shape"])
    >>> r.finish({"seq2seq.f": 3.0}).total
    2.0
    >>> GradeResult.from_json(r.to_json()) == r
    True
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from nbformat import NotebookNode

from autograder import __version__


def safe_name(student_id: str) -> str:
    """A file name for a student's feedback, cache and records, distinct for distinct ids.

    Args:
        student_id: any text (a student id may hold ``/``, spaces, control characters).

    Returns:
        The id itself when it is a plain name, else its plain characters and a digest.

    Example:
        >>> safe_name("s1001"), safe_name("a/b") != safe_name("a_b")
        ('s1001', True)
    """
    name = re.sub(r"[^A-Za-z0-9@.+_-]", "_", student_id)[:100] or "_"
    if name != student_id or name in (".", ".."):
        digest = hashlib.sha256(student_id.encode("utf-8", "backslashreplace")).hexdigest()[:8]
        name = f"{name}-{digest}"
    return name


#: What the stock nbgrader engine's command, closing summary, summary.html and every feedback page
#: say (``autograder/run/engine_nbgrader.py``): its grades can be earned by the graded notebook.
NOT_TAMPER_PROOF = (
    "Grades of the stock nbgrader engine (--engine nbgrader) are NOT tamper-proof: student code "
    "runs in the kernel that judges it, so a notebook can replace the tests or switch the "
    "reference guard off and earn points it did not earn. Use this engine as a "
    "baseline or a cross-check only, never for grades; grade with the hardened engine (the "
    "default, --engine hardened), which judges outside the student's process.")

#: The keys a cached result must have to be used at all.
_NEEDED = ("student_id", "status", "exercises", "total")


@dataclass
class Submission:
    """One student's file after ingest: the notebook to grade, or why it cannot be graded.

    Attributes:
        student_id: whom the file was mapped to.
        file: its path relative to the submissions folder, printable.
        sha256: the digest of the bytes read (the cache key; ``""`` when nothing was read).
        notebook: the validated notebook (nbformat 4), or ``None`` when ``invalid``.
        notes: repairs made while reading it (an old format upgraded).
        invalid: why it cannot be graded (``""`` when it can).
    """

    student_id: str
    file: str
    sha256: str
    notebook: NotebookNode | None = None
    notes: list[str] = field(default_factory=list)
    invalid: str = ""


@dataclass
class CellLog:
    """What one student cell or test did, for the feedback.

    Attributes:
        label: ``"your cell 4 (solution)"``, ``"visible tests"``.
        source: the code shown in the feedback (empty for a hidden part).
        output: what it printed (capped).
        error: its error message, or ``None``.
    """

    label: str
    source: str
    output: str
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """The plain dict of a result file."""
        return {"label": self.label, "source": self.source, "output": self.output,
                "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellLog:
        """A log from :meth:`to_json`'s dict (missing fields empty)."""
        return cls(str(data.get("label", "")), str(data.get("source", "")),
                   str(data.get("output", "") or ""), data.get("error"))


@dataclass
class ExerciseOutcome:
    """One exercise's grade and the reasons for it.

    Attributes:
        exercise_id: ``"seq2seq.beam_search"``.
        points, max_points: what it earned of what it is worth.
        status: ``"passed"``, ``"failed"``, ``"error"`` or ``"not graded"``.
        messages: the judge's messages (what failed and why), never the hidden inputs.
        notes: repairs and events (a solution found by its ``def`` line, a restarted kernel).
        logs: the cells that ran, with their outputs.
        fingerprint: the graded function's code as it ran, normalised by the sandbox's runner
            (:func:`autograder.run.sandbox_runner.describe_code`; untrusted, capped), for the
            similarity report only; ``""`` when none came back.
        code_origin: the file names of that code that are not a notebook cell's (``<string>``:
            compiled from a string), for the similarity report only.
    """

    exercise_id: str
    points: float
    max_points: float
    status: str
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: list[CellLog] = field(default_factory=list)
    fingerprint: str = ""
    code_origin: str = ""

    def to_json(self) -> dict[str, Any]:
        """The plain dict of a result file (the exercise id is its key there)."""
        data: dict[str, Any] = {
            "points": self.points, "max_points": self.max_points, "status": self.status,
            "messages": list(self.messages), "notes": list(self.notes),
            "logs": [log.to_json() for log in self.logs]}
        if self.fingerprint or self.code_origin:
            data.update(fingerprint=self.fingerprint, code_origin=self.code_origin)
        return data

    @classmethod
    def from_json(cls, exercise_id: str, data: dict[str, Any]) -> ExerciseOutcome:
        """An outcome from :meth:`to_json`'s dict."""
        return cls(exercise_id, float(data.get("points", 0.0)),
                   float(data.get("max_points", 0.0)), str(data.get("status", "not graded")),
                   list(data.get("messages", [])), list(data.get("notes", [])),
                   [CellLog.from_json(log) for log in data.get("logs", [])],
                   str(data.get("fingerprint", "") or ""), str(data.get("code_origin", "") or ""))


@dataclass
class GradeResult:
    """One student's result: the file graded, its status and every exercise's outcome.

    Attributes:
        student_id, file, sha256: whose file, which, and its digest.
        source_sha, engine, version: the chapter's source, the engine and the grader version
            it was graded with (the cache is used only when all match).
        status: ``"graded"`` or ``"could not grade"``; ``reason`` says why not.
        notes: repairs and events of the whole submission.
        exercises: exercise id -> outcome.
        total, max_total: the points of all exercises.
        seconds: how long grading took.
        nbgrader_feedback: the stock engine's feedback page, when it wrote one.
    """

    student_id: str
    file: str
    sha256: str
    source_sha: str
    engine: str
    version: str = __version__
    status: str = "graded"
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    exercises: dict[str, ExerciseOutcome] = field(default_factory=dict)
    total: float = 0.0
    max_total: float = 0.0
    seconds: float = 0.0
    nbgrader_feedback: str | None = None

    @classmethod
    def new(cls, student_id: str, file: str, sha256: str, source_sha: str, engine: str,
            max_total: float) -> GradeResult:
        """An empty result of the current grader version, graded so far with no points."""
        return cls(student_id, file, sha256, source_sha, engine, max_total=max_total)

    def fail(self, reason: str) -> GradeResult:
        """Mark the file as one that could not be graded, for ``reason``."""
        self.status, self.reason = "could not grade", reason
        return self

    def finish(self, max_points: dict[str, float]) -> GradeResult:
        """Fill in every exercise not graded (0 points, the reason) and add up the total.

        Args:
            max_points: exercise id -> points it is worth, in the chapter's order.
        """
        for eid, points in max_points.items():
            if eid not in self.exercises:
                self.exercises[eid] = ExerciseOutcome(eid, 0.0, points, "not graded",
                                                      [self.reason or "not graded"])
        self.total = float(sum(o.points for o in self.exercises.values()))
        self.max_total = float(sum(max_points.values()))
        return self

    def cache_key(self) -> tuple[str, str, str, str]:
        """What must match for this result to be reused: file, source, engine, version."""
        return (self.sha256, self.source_sha, self.engine, self.version)

    def to_json(self) -> dict[str, Any]:
        """The plain dict written to ``results/<student>.json``."""
        data: dict[str, Any] = {
            "student_id": self.student_id, "file": self.file, "sha256": self.sha256,
            "source_sha": self.source_sha, "engine": self.engine, "version": self.version,
            "status": self.status, "reason": self.reason, "notes": list(self.notes),
            "exercises": {eid: o.to_json() for eid, o in self.exercises.items()},
            "total": self.total, "max_total": self.max_total, "seconds": self.seconds}
        if self.nbgrader_feedback is not None:
            data["nbgrader_feedback"] = self.nbgrader_feedback
        return data

    @classmethod
    def from_json(cls, data: object) -> GradeResult | None:
        """A result read back from :meth:`to_json`'s dict; ``None`` when it cannot be used."""
        if not isinstance(data, dict) or not all(k in data for k in _NEEDED):
            return None
        try:
            return cls(
                str(data["student_id"]), str(data.get("file", "")), str(data.get("sha256", "")),
                str(data.get("source_sha", "")), str(data.get("engine", "")),
                str(data.get("version", "")), str(data["status"]), str(data.get("reason", "")),
                list(data.get("notes", [])),
                {eid: ExerciseOutcome.from_json(eid, o) for eid, o in data["exercises"].items()},
                float(data["total"]), float(data.get("max_total", 0.0)),
                float(data.get("seconds", 0.0)), data.get("nbgrader_feedback"))
        except (AttributeError, TypeError, ValueError):
            return None


@dataclass
class FileRow:
    """One file found among the submissions, as ``report.csv`` and the summary list it.

    Attributes:
        file: its path relative to the submissions folder (or the roster's name), printable.
        student_id: whom it was mapped to (``""`` when nobody).
        mapping: the rule that mapped it, or why it was not mapped.
        status: ``"graded"``, ``"could not grade"``, ``"not mapped"``, ``"not read"``,
            ``"roster warning"``, with `` (cached)`` when the result came from the cache.
        reason: why it was not graded.
        seconds: how long grading took (``""`` when it was not run).
    """

    file: str
    student_id: str = ""
    mapping: str = ""
    status: str = ""
    reason: str = ""
    seconds: float | str = ""

    @property
    def graded(self) -> bool:
        """Whether the file's grade is in grades.csv from a run of the grader."""
        return self.status in ("graded", "graded (cached)")
