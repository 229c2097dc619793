"""Canvas and Moodle grade-import files, round-tripped through parsers of their documented layouts.

Each parser below implements what the LMS's documentation says its import reads, and nothing
about how autograder/lms.py writes it:

* Canvas, "How do I import grades in the Gradebook?": a CSV whose first columns are ``Student``,
  ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section`` (in that order), then one column per
  assignment (``Name`` or ``Name (assignment id)``); a row whose Student is ``Points Possible``
  holds the assignments' points and no student; each student row is matched by ``ID``, else
  ``SIS User ID``, else ``SIS Login ID``; scores are numbers.
* Moodle, "Import grades from a CSV file": a header row, then one row per user; the importer
  chooses one column as the identifier ("Map from") and the user field it holds ("Map to": ID
  number, email address, username or user id), and a grade item for each other column; a row
  whose identifier is blank is skipped.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autograder.chapter_spec import ChapterSpec, ExerciseSpec
from autograder.report.lms import read_roster_rows, write_lms_files
from autograder.results import GradeResult

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def parse_canvas(path: Path) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(points possible per assignment, {matching key: {assignment: score}})``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert header[:5] == CANVAS_IDENTITY, header
    assignments = header[5:]
    assert assignments and all(a.strip() for a in assignments)
    points: dict[str, float] = {}
    grades: dict[str, dict[str, float]] = {}
    for row in rows[1:]:
        assert len(row) == len(header), row
        if row[0].strip() == "Points Possible":
            points = {a: float(v) for a, v in zip(assignments, row[5:])}
            continue
        key = next((f"{col}={v}" for col, v in zip(CANVAS_IDENTITY[1:4], row[1:4]) if v), None)
        assert key is not None, f"no ID, SIS User ID or SIS Login ID: {row}"
        assert key not in grades, f"two rows for {key}"
        grades[key] = {a: float(v) for a, v in zip(assignments, row[5:]) if v != ""}
    return points, grades


def parse_moodle(path: Path, map_from: str) -> dict[str, dict[str, float]]:
    """``{identifier: {grade item column: grade}}`` with ``map_from`` as the identifier column."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert map_from in (reader.fieldnames or []), reader.fieldnames
        out: dict[str, dict[str, float]] = {}
        identity = {"ID number", "Email address", "Username", "User id"}
        for row in reader:
            ident = row[map_from].strip()
            if not ident:
                continue
            assert ident not in out, f"two rows for {ident}"
            out[ident] = {k: float(v) for k, v in row.items() if k not in identity and v != ""}
    return out


@pytest.fixture()
def batch(tmp_path: Path) -> dict:
    spec = ChapterSpec("01-seq2seq", "seq2seq", ["setup"], [
        ExerciseSpec("seq2seq.a", "a", "a", "a", "test_a", None, None, 2.0, "", ""),
        ExerciseSpec("seq2seq.b", "b", "b", "b", "test_b", None, None, 3.5, "", "")])
    results = [GradeResult(sid, "", "", "", "hardened", total=total) for sid, total in
               (("s1001", 5.5), ("s1002", 2.0), ("folder-only", 0.0), ("=cmd", 3.5))]
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "student_id,name,email,canvas_id,sis_user_id,sis_login_id,section,username,idnumber\n"
        's1001,"Doe, Jane ""JD""",jane@uni.edu,4711,SIS-1,jdoe,Section A,jdoe,ID-1\n'
        "s1002,Émile Zola,emile@uni.edu,4712,,ezola,Section B,ezola,\n"
        "s1003,No Submission,no@uni.edu,4713,SIS-3,nosub,Section A,nosub,ID-3\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    paths = write_lms_files(out, spec, results, read_roster_rows(roster))
    return {"spec": spec, "results": results, "paths": paths}


def test_canvas_file_round_trips(batch) -> None:
    points, grades = parse_canvas(batch["paths"][0])
    assert points == {"01-seq2seq": 5.5}
    assert grades == {
        "ID=4711": {"01-seq2seq": 5.5},  # matched by Canvas's own id
        "ID=4712": {"01-seq2seq": 2.0},
        "SIS User ID=folder-only": {"01-seq2seq": 0.0},  # not on the roster: the student id
        "SIS User ID='=cmd": {"01-seq2seq": 3.5},  # never a spreadsheet formula
    }
    with open(batch["paths"][0], newline="", encoding="utf-8") as f:
        rows = {r["ID"]: r for r in csv.DictReader(f)}
    assert rows["4711"]["Student"] == 'Doe, Jane "JD"' and rows["4711"]["SIS User ID"] == "SIS-1"
    assert rows["4711"]["SIS Login ID"] == "jdoe" and rows["4711"]["Section"] == "Section A"
    assert rows["4712"]["Student"] == "Émile Zola" and rows["4712"]["SIS User ID"] == "s1002"
    assert "4713" not in rows  # no submission: left out, the LMS keeps its grade


@pytest.mark.parametrize("map_from,expected", [
    ("ID number", {"ID-1": 5.5, "s1002": 2.0, "folder-only": 0.0, "'=cmd": 3.5}),
    ("Email address", {"jane@uni.edu": 5.5, "emile@uni.edu": 2.0}),
    ("Username", {"jdoe": 5.5, "ezola": 2.0}),
])
def test_moodle_file_round_trips(batch, map_from: str, expected: dict[str, float]) -> None:
    grades = parse_moodle(batch["paths"][1], map_from)
    assert grades == {k: {"01-seq2seq": v} for k, v in expected.items()}


def test_without_a_roster_both_files_are_keyed_by_student_id(batch, tmp_path: Path) -> None:
    out = tmp_path / "bare"
    out.mkdir()
    canvas, moodle = write_lms_files(out, batch["spec"], batch["results"][:2], {})
    assert parse_canvas(canvas)[1] == {"SIS User ID=s1001": {"01-seq2seq": 5.5},
                                       "SIS User ID=s1002": {"01-seq2seq": 2.0}}
    assert parse_moodle(moodle, "ID number") == {"s1001": {"01-seq2seq": 5.5},
                                                 "s1002": {"01-seq2seq": 2.0}}


def test_two_students_with_one_name_get_their_own_grades_in_canvas(tmp_path: Path) -> None:
    """Issue 17, item 5: the points of the first "Wei Zhang" went to the second's Canvas user."""
    import os

    from autograder.ingest import discover, read_roster

    spec = ChapterSpec("01-seq2seq", "seq2seq", ["setup"], [
        ExerciseSpec("seq2seq.a", "a", "a", "a", "test_a", None, None, 17.0, "", "")])
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, text, stamp in (("zhangwei_3001_5001_seq2seq.ipynb", "solved", 2e9),
                              ("zhangwei_3002_5002_seq2seq.ipynb", "blank", 1e9)):
        (subs / name).write_text(text)
        os.utime(subs / name, (stamp, stamp))
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,canvas_id\ns1001,Wei Zhang,3001\ns1002,Wei Zhang,3002\n")
    graded = [f for f in discover(subs, "seq2seq", read_roster(roster)) if f.student]
    results = [GradeResult(f.student, "", "", "", "hardened",
                           total=17.0 if f.path.read_text() == "solved" else 0.0) for f in graded]
    out = tmp_path / "out"
    out.mkdir()
    canvas, _ = write_lms_files(out, spec, results, read_roster_rows(roster))
    assert parse_canvas(canvas)[1] == {"ID=3001": {"01-seq2seq": 17.0},
                                       "ID=3002": {"01-seq2seq": 0.0}}


def test_one_student_id_on_two_roster_rows_is_an_error(tmp_path: Path) -> None:
    """Which row's Canvas id gets the grade would be a guess: the roster is refused."""
    from autograder.ingest import RosterError

    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,canvas_id\ns1,Ann Lee,11\ns2,Bob Stone,12\ns1,Ann Lee,13\n")
    with pytest.raises(RosterError, match="student_id s1 is on rows 2 and 4"):
        read_roster_rows(roster)
