"""Grade-import files of the two most used LMSs, filled from the roster's columns.

Both files hold one row per student of ``grades.csv`` (students without a submission are left
out, so an import leaves their LMS grade as it was) and one grade: the chapter's total.

``canvas_grades.csv``: Canvas's gradebook CSV (Grades > Import)::

    Student,ID,SIS User ID,SIS Login ID,Section,01-seq2seq
    Points Possible,,,,,16
    "Doe, Jane",4711,s1001,jdoe,Section A,14

The five identity columns in Canvas's order, then the assignment column (a header Canvas does
not know creates that assignment; rename it to an existing assignment's name, or ``Name (id)``,
to fill that one), then the "Points Possible" row Canvas's own export writes. Canvas identifies
each row by ``ID`` (its user id), ``SIS User ID`` or ``SIS Login ID``, so the roster should
carry at least one of them; ``Student`` is only shown.

``moodle_grades.csv``: Moodle's grade import (Grades > Import > CSV file)::

    ID number,Email address,Username,01-seq2seq
    s1001,jane@uni.edu,jdoe,14

Moodle asks which column identifies the user ("Map from") and which user field it holds
("Map to": ID number, email address, username or user id), and which grade item each other
column fills.

Roster columns read (all optional but ``student_id``): ``name``; ``canvas_id``,
``sis_user_id``, ``sis_login_id``, ``section`` (Canvas); ``idnumber``, ``email``, ``username``
(Moodle). ``SIS User ID`` and ``ID number`` fall back to the grader's ``student_id``, the name to
the student id, so a run without a roster still writes importable files keyed by student id.
"""

from __future__ import annotations

from pathlib import Path

from autograder.chapter_spec import ChapterSpec
from autograder.ingest.roster import read_roster
from autograder.report import csvsafe
from autograder.results import GradeResult

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_COLUMNS = ["ID number", "Email address", "Username"]


def read_roster_rows(path: Path | None) -> dict[str, dict[str, str]]:
    """``student_id -> {column: value}`` of a roster CSV (empty without a roster).

    Read by :func:`autograder.ingest.roster.read_roster`, the reader that maps files to students,
    so both key a row by the same student id (headers without case or surrounding spaces,
    values stripped).

    Raises:
        autograder.ingest.roster.RosterError: as ``read_roster`` does, e.g. one student id on two
            rows (whose LMS ids would otherwise be a guess).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "roster.csv"
        >>> _ = path.write_text("Student_ID,Canvas_ID\\ns1,4711\\n")
        >>> read_roster_rows(path)
        {'s1': {'student_id': 's1', 'canvas_id': '4711'}}
    """
    if path is None:
        return {}
    return read_roster(path).rows


def _points(value: float) -> str:
    return f"{value:g}"


def write_canvas(path: Path, assignment: str, spec: ChapterSpec, results: list[GradeResult],
                 roster: dict[str, dict[str, str]]) -> None:
    """Canvas's gradebook import CSV (see the module docstring)."""
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)  # no cell runs as a spreadsheet formula
        w.writerow([*CANVAS_COLUMNS, assignment])
        w.writerow([CANVAS_POINTS_ROW, "", "", "", "", _points(spec.max_total)])
        for r in sorted(results, key=lambda r: r.student_id):
            sid = r.student_id
            row = roster.get(sid, {})
            w.writerow([row.get("name") or sid, row.get("canvas_id", ""),
                        row.get("sis_user_id") or sid, row.get("sis_login_id", ""),
                        row.get("section", ""), _points(r.total)])


def write_moodle(path: Path, assignment: str, spec: ChapterSpec, results: list[GradeResult],
                 roster: dict[str, dict[str, str]]) -> None:
    """Moodle's grade import CSV (see the module docstring)."""
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)  # no cell runs as a spreadsheet formula
        w.writerow([*MOODLE_COLUMNS, assignment])
        for r in sorted(results, key=lambda r: r.student_id):
            sid = r.student_id
            row = roster.get(sid, {})
            w.writerow([row.get("idnumber") or sid, row.get("email", ""),
                        row.get("username", ""), _points(r.total)])


def write_lms_files(out: Path, spec: ChapterSpec, results: list[GradeResult],
                    roster: dict[str, dict[str, str]]) -> list[Path]:
    """Both files under ``out``; the assignment column is named after the chapter."""
    paths = [out / "canvas_grades.csv", out / "moodle_grades.csv"]
    write_canvas(paths[0], spec.name, spec, results, roster)
    write_moodle(paths[1], spec.name, spec, results, roster)
    return paths
