"""Files go to the right student: the LMS's own fields decide, nothing ambiguous is guessed.

Issue 17, items 5 and 6.

Canvas names a downloaded file ``<name>_<user id>_<submission id>_<original name>`` (or
``<name>_LATE_<user id>_...``); Moodle puts each student's files in a folder
``<full name>_<participant id>_assignsubmission_file_/`` (or names flat files that way). The
student's own original file name (``smithalice.ipynb``) never decides whose file it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import nbformat
import pytest

from autograder.ingest import SubmissionFile, discover, read_roster

WEI_ROWS = ("s1001,Wei Zhang,wei1@uni.edu,3001\n"
            "s1002,Wei Zhang,wei2@uni.edu,3002\n")


def _write(path: Path, mtime: float, source: str = "x = 1") -> Path:
    """A tiny valid notebook at ``path`` with modification time ``mtime``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source)])), encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def _roster(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    return path


def _found(root: Path, roster_path: Path | None) -> dict[str, SubmissionFile]:
    roster = read_roster(roster_path) if roster_path else None
    return {f.rel: f for f in discover(root, "seq2seq", roster)}


# -- issue 17, item 5: two students with one name ------------------------------------------------


def test_two_students_with_one_name_are_told_apart_by_their_canvas_ids(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "zhangwei_3001_5001_seq2seq.ipynb", 1e9, "solved = True")
    _write(subs / "zhangwei_3002_5002_seq2seq.ipynb", 2e9)  # newer, another Canvas user
    roster = _roster(tmp_path, "student_id,name,email,canvas_id\n" + WEI_ROWS)
    files = _found(subs, roster)
    first, second = files["zhangwei_3001_5001_seq2seq.ipynb"], \
        files["zhangwei_3002_5002_seq2seq.ipynb"]
    assert (first.student, first.problem) == ("s1001", "")
    assert (second.student, second.problem) == ("s1002", "")
    assert "Canvas user id 3001" in first.rule and first.identity == "Canvas user 3001"


def test_a_name_shared_by_two_rows_is_reported_never_guessed(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "zhangwei_3001_5001_seq2seq.ipynb", 1e9)
    _write(subs / "Wei Zhang.ipynb", 2e9)  # not an LMS name: the roster's tokens
    roster = _roster(tmp_path, "student_id,name,email\n"
                     "s1001,Wei Zhang,wei1@uni.edu\ns1002,Wei Zhang,wei2@uni.edu\n")
    files = _found(subs, roster)
    for rel in ("zhangwei_3001_5001_seq2seq.ipynb", "Wei Zhang.ipynb"):
        assert files[rel].student is None, rel
        assert "s1001" in files[rel].problem and "s1002" in files[rel].problem, rel
        assert "share" in files[rel].problem, rel
    (warning,) = read_roster(roster).warnings
    assert "'wei zhang'" in warning and "'zhangwei'" in warning
    assert "s1001, s1002" in warning and "rows 2 and 3" in warning


def test_an_own_unique_token_decides_next_to_a_shared_name(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "Wei Zhang wei2.ipynb", 1e9)  # the shared name and s1002's e-mail name
    _write(subs / "Wei Zhang wei2 s1001.ipynb", 1e9)  # two different students named
    roster = _roster(tmp_path, "student_id,name,email\n"
                     "s1001,Wei Zhang,wei1@uni.edu\ns1002,Wei Zhang,wei2@uni.edu\n")
    files = _found(subs, roster)
    assert files["Wei Zhang wei2.ipynb"].student == "s1002"
    assert files["Wei Zhang wei2 s1001.ipynb"].student is None
    assert "several roster entries" in files["Wei Zhang wei2 s1001.ipynb"].problem


# -- issue 17, item 6: a file named after a classmate ------------------------------------------


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_file_named_after_a_classmate_never_replaces_her_work(tmp_path: Path,
                                                                 with_ids: bool) -> None:
    subs = tmp_path / "subs"
    _write(subs / "smithalice_2001_9101_seq2seq.ipynb", 1e9, "solved = True")
    _write(subs / "jonesrobert_2002_9102_smithalice.ipynb", 2e9)  # Bob's upload, newer
    header = "student_id,name,email" + (",canvas_id" if with_ids else "")
    roster = _roster(tmp_path, f"{header}\n"
                     f"s1,Alice Smith,alice@uni.edu{',2001' if with_ids else ''}\n"
                     f"s2,Bob Jones,bob@uni.edu{',2002' if with_ids else ''}\n")
    files = _found(subs, roster)
    alice, bob = files["smithalice_2001_9101_seq2seq.ipynb"], \
        files["jonesrobert_2002_9102_smithalice.ipynb"]
    assert (alice.student, alice.problem) == ("s1", "")
    if with_ids:
        assert (bob.student, bob.problem) == ("s2", "")
    else:  # Canvas's name field 'jonesrobert' is on no row: reported, not given to Alice
        assert bob.student is None
        assert "'jonesrobert'" in bob.problem and "Canvas user 2002" in bob.problem
        assert "canvas_id" in bob.problem


def test_a_canvas_name_on_a_row_holding_another_canvas_id_is_not_mapped(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "smithalice_2009_9109_seq2seq.ipynb", 1e9)
    roster = _roster(tmp_path, "student_id,name,canvas_id\ns1,Alice Smith,2001\n")
    (sf,) = _found(subs, roster).values()
    assert sf.student is None
    assert "canvas_id is 2001, not 2009" in sf.problem


def test_canvas_late_form_and_resubmissions_of_one_user(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "doejane_LATE_4711_6001_seq2seq.ipynb", 2e9)
    _write(subs / "doejane_4711_6000_seq2seq.ipynb", 1e9)  # the same Canvas user, older
    roster = _roster(tmp_path, "student_id,name,canvas_id\ns1,Jane Doe,4711\n")
    files = _found(subs, roster)
    assert files["doejane_LATE_4711_6001_seq2seq.ipynb"].student == "s1"
    old = files["doejane_4711_6000_seq2seq.ipynb"]
    assert old.student is None and old.problem.startswith("superseded by the newer")


# -- files of different LMS users never supersede each other -----------------------------------


@pytest.mark.parametrize("roster_text", [None, "student_id,name\ns1,Wei Zhang\n"])
def test_files_of_two_canvas_users_for_one_student_are_a_conflict(
        tmp_path: Path, roster_text: str | None) -> None:
    subs = tmp_path / "subs"
    _write(subs / "zhangwei_3001_5001_seq2seq.ipynb", 1e9, "solved = True")
    _write(subs / "zhangwei_3002_5002_seq2seq.ipynb", 2e9)
    files = _found(subs, _roster(tmp_path, roster_text) if roster_text else None)
    for sf in files.values():
        assert sf.student is None
        assert "conflict" in sf.problem and "superseded" not in sf.problem
        assert "Canvas user 3001" in sf.problem and "Canvas user 3002" in sf.problem


# -- Moodle ------------------------------------------------------------------------------------


def test_moodle_folders_and_flat_files_map_by_participant_id_first(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "Wei Zhang_801_assignsubmission_file_" / "seq2seq.ipynb", 1e9)
    _write(subs / "Wei Zhang_802_assignsubmission_file_" / "smithalice.ipynb", 1e9)
    _write(subs / "Alice Smith_803_assignsubmission_file_seq2seq.ipynb", 1e9)
    _write(subs / "Alice Smith_899_assignsubmission_file_" / "seq2seq.ipynb", 1e9)
    roster = _roster(tmp_path, "student_id,name,moodle_id\n"
                     "s1001,Wei Zhang,801\ns1002,Wei Zhang,802\ns3,Alice Smith,803\n")
    files = _found(subs, roster)
    assert files["Wei Zhang_801_assignsubmission_file_/seq2seq.ipynb"].student == "s1001"
    assert files["Wei Zhang_802_assignsubmission_file_/smithalice.ipynb"].student == "s1002"
    flat = files["Alice Smith_803_assignsubmission_file_seq2seq.ipynb"]
    assert flat.student == "s3" and flat.identity == "Moodle participant 803"
    other = files["Alice Smith_899_assignsubmission_file_/seq2seq.ipynb"]
    assert other.student is None and "moodle_id is 803, not 899" in other.problem


def test_participant_id_column_and_moodle_names_without_ids(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "Bob Stone_51_assignsubmission_file_" / "seq2seq.ipynb", 1e9)
    _write(subs / "Ann Lee_52_assignsubmission_file_" / "seq2seq.ipynb", 1e9)
    roster = _roster(tmp_path, "student_id,name,participant_id\ns1,Bob Stone,51\ns2,Ann Lee,\n")
    files = _found(subs, roster)
    assert files["Bob Stone_51_assignsubmission_file_/seq2seq.ipynb"].student == "s1"
    ann = files["Ann Lee_52_assignsubmission_file_/seq2seq.ipynb"]
    assert ann.student == "s2" and "Moodle name" in ann.rule


# -- Unicode and token boundaries --------------------------------------------------------------


def test_names_in_another_unicode_normal_form_match(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    nfd = unicodedata.normalize("NFD", "ZOË Brown")
    _write(subs / f"{nfd}_61_assignsubmission_file_" / "seq2seq.ipynb", 1e9)
    _write(subs / f"{unicodedata.normalize('NFD', 'müllerjörg')}_71_81_seq2seq.ipynb", 1e9)
    _write(subs / f"{unicodedata.normalize('NFD', 'Zoë')}-b.ipynb", 1e9)
    roster = _roster(tmp_path, "student_id,name,aliases\n"
                     f"s1,{unicodedata.normalize('NFC', 'Zoë Brown')},\ns2,Jörg Müller,\n"
                     "s3,Zoe Black,ZOË-B\n")
    files = {unicodedata.normalize("NFC", rel): f for rel, f in _found(subs, roster).items()}
    assert files["ZOË Brown_61_assignsubmission_file_/seq2seq.ipynb"].student == "s1"
    assert files["müllerjörg_71_81_seq2seq.ipynb"].student == "s2"
    assert files["Zoë-b.ipynb"].student == "s3"


def test_a_name_matches_whole_tokens_only(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "Joann Leeds seq2seq.ipynb", 1e9)
    _write(subs / "Ann Lee seq2seq.ipynb", 1e9)
    roster = _roster(tmp_path, "student_id,name\ns1,Ann Lee\n")
    files = _found(subs, roster)
    assert files["Ann Lee seq2seq.ipynb"].student == "s1"
    assert files["Joann Leeds seq2seq.ipynb"].student is None


def test_canvas_names_of_last_first_rosters_match(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _write(subs / "doejanemary_11_21_seq2seq.ipynb", 1e9)
    _write(subs / "smithbob_12_22_seq2seq.ipynb", 1e9)
    roster = _roster(tmp_path, 'student_id,name\ns1,Jane Mary Doe\ns2,"Smith, Bob"\n')
    files = _found(subs, roster)
    assert files["doejanemary_11_21_seq2seq.ipynb"].student == "s1"
    assert files["smithbob_12_22_seq2seq.ipynb"].student == "s2"


# -- the roster itself -------------------------------------------------------------------------


def test_roster_problems_are_errors_or_warnings(tmp_path: Path) -> None:
    from autograder.ingest import RosterError

    with pytest.raises(RosterError, match=r"s1 is on rows 2 and 3"):
        read_roster(_roster(tmp_path, "student_id,name\ns1,Ann Lee\ns1,Bob Stone\n"))
    with pytest.raises(RosterError, match="no student_id column"):
        read_roster(_roster(tmp_path, "name,email\nAnn Lee,ann@uni.edu\n"))
    with pytest.raises(RosterError, match="could not be read"):
        read_roster(tmp_path / "missing.csv")
    roster = read_roster(_roster(tmp_path, " Student_ID ,Name,Canvas_ID\n"
                                 "s1,Ann Lee,7\n,Nobody,\ns2,Bob Stone,7\n"))
    assert sorted(roster.rows) == ["s1", "s2"] and roster.rows["s1"]["canvas_id"] == "7"
    assert any("row 3 has no student_id" in w for w in roster.warnings)
    assert any("canvas_id 7 is on rows 2 and 4 (s1, s2)" in w for w in roster.warnings)
    subs = tmp_path / "subs"
    _write(subs / "leeann_7_1_seq2seq.ipynb", 1e9)
    (sf,) = discover(subs, "seq2seq", roster)
    assert sf.student is None and "several roster rows (s1, s2)" in sf.problem


@pytest.mark.slow
@pytest.mark.xdist_group("autograder-grade")
def test_grade_prints_the_roster_warnings_and_keeps_them_in_the_report(tmp_path: Path) -> None:
    import csv

    from coursebook.chapters import REPO
    from tests.adversarial.chapters import FIXTURE, FIXTURES, released_copy

    fixtures = FIXTURES
    chapter = released_copy(FIXTURE, tmp_path / "course")
    subs = tmp_path / "subs"
    (subs / "notes.txt").parent.mkdir()
    (subs / "notes.txt").write_text("nothing to grade")
    roster = _roster(tmp_path, "student_id,name\ns1001,Wei Zhang\ns1002,Wei Zhang\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "00", str(subs), "--roster", str(roster),
         "--out", str(out), "--no-progress", "--root", str(chapter.root)],
        cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "AUTOGRADER_EXTRA_EXERCISES": str(fixtures / "exercises")},
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "roster warning" in proc.stderr and "s1001, s1002" in proc.stderr
    with open(out / "report.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "roster warning"]
    assert len(rows) == 1 and rows[0]["file"] == "roster.csv"
    assert "'wei zhang'" in rows[0]["reason"]
    bad = _roster(tmp_path, "student_id\ns1\ns1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "00", str(subs), "--roster", str(bad),
         "--out", str(out), "--no-progress", "--root", str(chapter.root)],
        cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "AUTOGRADER_EXTRA_EXERCISES": str(fixtures / "exercises")},
        timeout=300)
    assert proc.returncode == 2 and "s1 is on rows 2 and 3" in proc.stderr
