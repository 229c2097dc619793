"""The grader's tables: ``grades.csv``, ``grades_long.csv`` and ``report.csv``.

Every text cell goes through :func:`autograder.report.csvsafe.safe_cell`: a student id or a
file name never runs as a spreadsheet formula.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from autograder.chapter_spec import ChapterSpec
from autograder.report import csvsafe
from autograder.results import FileRow, GradeResult

REPORT_COLUMNS = ["file", "student_id", "mapping", "status", "reason", "seconds"]


def _points(result: GradeResult, exercise_id: str) -> str:
    """The points of one exercise as written in the tables (0 when it has no outcome)."""
    outcome = result.exercises.get(exercise_id)
    return f"{outcome.points if outcome is not None else 0.0:g}"


def write_grades_csv(path: Path, chapter: ChapterSpec, results: list[GradeResult]) -> None:
    """Two tables of the same grades, one row per student sorted by id.

    ``path`` (``grades.csv``): ``student_id, <exercise>..., total, max_total``.
    ``grades_long.csv`` beside it: ``student_id, exercise, points, max_points``, a row per
    student and exercise (the shape most LMS imports and spreadsheets pivot from).
    """
    rows = sorted(results, key=lambda r: r.student_id)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["student_id", *[ex.name for ex in chapter.exercises], "total", "max_total"])
        for r in rows:
            w.writerow([r.student_id, *[_points(r, ex.exercise_id) for ex in chapter.exercises],
                        f"{r.total:g}", f"{r.max_total:g}"])
    with open(path.with_name("grades_long.csv"), "w", newline="", encoding="utf-8",
              errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["student_id", "exercise", "points", "max_points"])
        for r in rows:
            for ex in chapter.exercises:
                w.writerow([r.student_id, ex.name, _points(r, ex.exercise_id), f"{ex.points:g}"])


def write_report_csv(path: Path, rows: list[FileRow]) -> None:
    """Every file seen: the student it was mapped to (or why not), status, reason, seconds."""
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.dict_writer(f, REPORT_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow(asdict(row))
