"""Every output of a grading run, each written on its own.

A failure while writing one output (a full disk, a plot that cannot be drawn) is reported and
the other outputs are still written: :func:`write_outputs` returns what could not be written.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.chapter_spec import ChapterSpec
from autograder.report.feedback import render_feedback
from autograder.report.gradebook import write_gradebook
from autograder.report.lms import read_roster_rows, write_lms_files
from autograder.report.plot import plot_distribution
from autograder.report.similarity import analyse, student_code, write_report
from autograder.report.summary import write_summary
from autograder.report.tables import write_grades_csv, write_report_csv
from autograder.results import FileRow, GradeResult, Submission, safe_name

FAILED = object()


@dataclass
class Batch:
    """What a grading run hands the report stage.

    Attributes:
        assignment: nbgrader's assignment id, the chapter's slug (``01-seq2seq``).
        notebook: the notebook's name without ``.ipynb`` (``seq2seq``).
        spec: the chapter's exercises.
        results: ``student id -> result`` of every student in grades.csv.
        rows: every file found (``report.csv``), after the roster's warnings ``roster_rows``.
        submissions: the students' files as read (their code goes into the similarity report).
        cached: the students whose result came from the cache.
        roster: the roster file, for the LMS files' columns.
    """

    assignment: str
    notebook: str
    spec: ChapterSpec
    results: dict[str, GradeResult]
    rows: list[FileRow]
    roster_rows: list[FileRow] = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    cached: set[str] = field(default_factory=set)
    roster: Path | None = None


def _step(failures: list[str], what: str, fn: Callable[[], Any]) -> Any:
    """Run one output step; a failure is recorded (``FAILED``) and the next steps still run."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one output never stops the others
        failures.append(f"{what}: {type(err).__name__}: {str(err)[:300]}")
        return FAILED


def _write_student(out: Path, batch: Batch, r: GradeResult, failures: list[str]) -> None:
    """The student's cache file and feedback page (stock nbgrader's own page when it wrote one;
    a cached stock-engine page is kept)."""
    name = safe_name(r.student_id)
    _step(failures, f"results/{name}.json", lambda: (out / "results" / f"{name}.json").write_text(
        json.dumps(r.to_json(), indent=1)))
    page = out / "feedback" / f"{name}.html"
    if r.nbgrader_feedback and Path(r.nbgrader_feedback).exists():
        _step(failures, f"feedback of {r.student_id}", lambda: shutil.copyfile(
            str(r.nbgrader_feedback), page))
    elif not (r.engine == "nbgrader" and page.exists() and r.student_id in batch.cached):
        _step(failures, f"feedback of {r.student_id}", lambda: page.write_text(
            render_feedback(batch.spec, r), encoding="utf-8", errors="backslashreplace"))


def _similarity(out: Path, batch: Batch) -> int:
    """Write the similarity report of every readable submission (their code as written, and the
    code that ran as the hardened engine described it); return its number of flags."""
    code: dict[str, dict[str, str]] = {}
    for sub in batch.submissions:
        if sub.notebook is None:
            continue
        try:
            code[sub.student_id] = student_code(batch.spec, sub.notebook)
        except Exception:  # noqa: BLE001 - the similarity report is advisory
            pass
    runtime = {sid: {eid: (o.fingerprint, o.code_origin) for eid, o in r.exercises.items()
                     if o.fingerprint or o.code_origin}
               for sid, r in batch.results.items()}
    report = analyse(batch.spec, code, runtime={k: v for k, v in runtime.items() if v})
    write_report(out, batch.spec, report)
    return len(report.flags) + len(report.dynamic)


def write_outputs(out: Path, batch: Batch,
                  wall: Callable[[], float]) -> tuple[list[str], int | None]:
    """Write every output of the run under ``out``, each on its own.

    Args:
        out: the output folder (``feedback/`` and ``results/`` exist).
        batch: what was graded.
        wall: the run's wall time so far, read when the summary is written.

    Returns:
        ``(what could not be written, with why; the number of similarity flags or None)``.
    """
    failures: list[str] = []
    for r in batch.results.values():
        _write_student(out, batch, r, failures)
    spec = batch.spec
    final = sorted(batch.results.values(), key=lambda r: r.student_id)
    _step(failures, "grades.csv", lambda: write_grades_csv(out / "grades.csv", spec, final))
    _step(failures, "report.csv", lambda: write_report_csv(out / "report.csv",
                                                           batch.roster_rows + batch.rows))
    _step(failures, "LMS files", lambda: write_lms_files(out, spec, final,
                                                         read_roster_rows(batch.roster)))
    plot = None
    if final:
        _step(failures, "gradebook.db", lambda: write_gradebook(
            out / "gradebook.db", batch.assignment, batch.notebook, spec, final))
        if _step(failures, "score_distribution.png", lambda: plot_distribution(
                out / "score_distribution.png", spec, final)) is not FAILED:
            plot = out / "score_distribution.png"
    flags = _step(failures, "similarity report", lambda: _similarity(out, batch))
    flags = None if flags is FAILED else flags
    _step(failures, "summary.html", lambda: write_summary(
        out / "summary.html", spec, final, batch.rows, plot, flags, wall()))
    return failures, flags
