"""The hardened grader against bad submissions, and the foundation checks with both engines.

Each submission of tests/adversarial/generate.py carries the grade it must get and why. They are
built from chapter 1's real release when it exists, else from the fixture chapter. The whole
batch is graded in one run (parallel workers), so this also checks that no submission affects
another, the gradebook or the machine.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from coursebook.chapters import REPO, Chapter
from tests.adversarial.chapters import FIXTURES, first_chapter, released_copy
from tests.adversarial.generate import MARKER, build_suite, load, write_suite

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("autograder-adversarial")]



def _chapter(tmp: Path) -> tuple[Chapter, dict[str, str]]:
    """Chapter 1 when its source exists, else the fixture chapter, with its release.

    The source is copied under ``tmp`` first (a chapter being edited meanwhile changes nothing
    in this run), and released there as the release command does
    (:func:`tests.adversarial.chapters.released_copy`).
    """
    env = dict(os.environ)
    original = first_chapter()
    if original.number == 0:
        env["AUTOGRADER_EXTRA_EXERCISES"] = str(FIXTURES / "exercises")
    return released_copy(original, tmp), env


def _grade(chapter: Chapter, env: dict, subs: Path, out: Path,
           *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autograder", "grade", chapter.slug, str(subs), "--out", str(out),
           "--root", str(chapter.root), "--no-progress", *extra]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _grades(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


class _Listener:
    """A TCP server on the host's loopback that records any connection a sandbox makes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adversarial")
    chapter, env = _chapter(tmp)
    spec = load(chapter)
    out = tmp / "out"
    listener = _Listener()
    secrets = [str(chapter.source), str(out / "gradebook.db"), str(tmp / "subs"),
               str(REPO / "solutions"), str(REPO / ".git")]
    subs = build_suite(chapter, spec, secret_paths=secrets, port=listener.port)
    write_suite(subs, tmp / "subs")
    proc = _grade(chapter, env, tmp / "subs", out, "--cell-timeout", "20", "--workers", "2")
    listener.close()
    return {"chapter": chapter, "env": env, "spec": spec, "subs": subs, "out": out, "tmp": tmp,
            "proc": proc, "listener": listener}


def test_batch_completes_with_every_submission_in_grades(suite) -> None:
    assert suite["proc"].returncode == 0, suite["proc"].stderr[-3000:]
    grades = _grades(suite["out"])
    assert sorted(grades) == sorted(s.student for s in suite["subs"] if s.in_grades)


@pytest.mark.parametrize("name", [
    "solution", "blank", "partial", "calls-reference", "reference-guard-off", "infinite-loop",
    "os-exit", "segfault", "memory-bomb", "fork-bomb", "detached-child", "huge-output",
    "sys-exit", "edited-tests", "deleted-tests", "duplicate-grade-id", "changed-cell-types",
    "stripped-metadata", "colab", "colab-blank", "malformed-json", "nbformat-3", "empty-file",
    "other-chapter", "reads-secrets", "writes-gradebook", "network", "patched-testing",
    "eq-always-true", "input-transformer", "helper-cells", "deep-json", "symlink-to-solution",
    "named-pipe", "malformed-cell", "deep-expression", "odd-output", "renamed-copy"])
def test_each_submission_gets_exactly_its_grade(suite, name: str) -> None:
    sub = next(s for s in suite["subs"] if s.student == name)
    row = _grades(suite["out"])[name]
    got = {ex.exercise_id: float(row[ex.name]) for ex in suite["spec"].exercises}
    assert got == sub.expected, f"{name} ({sub.why}): got {got}, expected {sub.expected}"
    assert float(row["total"]) == sum(sub.expected.values())
    result = json.loads((suite["out"] / "results" / f"{name}.json").read_text())
    assert (result["status"] == "could not grade") == sub.invalid, result.get("reason")


def test_no_process_network_or_gradebook_leak(suite) -> None:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert MARKER not in ps, "a detached child outlived its sandbox"
    assert suite["listener"].connections == 0, "a sandbox reached the host's network"
    from nbgrader.api import Gradebook

    grades = _grades(suite["out"])
    with Gradebook(f"sqlite:///{suite['out'] / 'gradebook.db'}") as gb:
        for sid, row in grades.items():
            sub = gb.find_submission(suite["chapter"].slug, sid)
            assert sub.score == pytest.approx(float(row["total"])), sid


def test_feedback_never_shows_hidden_tests(suite) -> None:
    pages = list((suite["out"] / "feedback").glob("*.html"))
    assert len(pages) == sum(s.in_grades for s in suite["subs"])
    for page in pages:
        text = page.read_text()
        assert "BEGIN HIDDEN TESTS" not in text and "grading.check(" not in text, page.name
    notes = (suite["out"] / "feedback" / "stripped-metadata.html").read_text()
    assert "line" in notes and "metadata was missing" in notes
    assert "could not grade" in (suite["out"] / "feedback" / "empty-file.html").read_text().lower()


def test_rerun_is_cached_and_a_late_file_grades_only_itself(suite, tmp_path) -> None:
    subs = suite["tmp"] / "subs"
    before = (suite["out"] / "grades.csv").read_text()
    late = subs / "late-student"
    late.mkdir()
    solution = next(s for s in suite["subs"] if s.student == "solution")
    (late / f"Copy of {suite['chapter'].stem}.ipynb").write_bytes(solution.content)
    proc = _grade(suite["chapter"], suite["env"], subs, suite["out"], "--cell-timeout", "20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(suite["out"] / "report.csv", newline="") as f:
        status = {row["student_id"]: row["status"] for row in csv.DictReader(f)}
    assert status["late-student"] == "graded"
    assert status.pop("") == "not read"  # the linked folder, reported again and still not read
    assert all(v.endswith("(cached)") for k, v in status.items() if k != "late-student")
    after = _grades(suite["out"])
    assert float(after["late-student"]["total"]) == suite["spec"].max_total
    old_rows = [line for line in before.splitlines()]
    new_rows = [line for line in (suite["out"] / "grades.csv").read_text().splitlines()
                if not line.startswith("late-student,")]
    assert old_rows == new_rows


def test_stock_nbgrader_engine_foundation(suite, tmp_path) -> None:
    """The real nbgrader pipeline: full marks, zero, exactly the solved points, reference = 0."""
    subs = tmp_path / "subs"
    chosen = [s for s in suite["subs"]
              if s.student in ("solution", "blank", "partial", "calls-reference")]
    write_suite(chosen, subs)
    env = {**suite["env"], "COURSE_LIB_QUICK": "1"}
    proc = _grade(suite["chapter"], env, subs, tmp_path / "out", "--engine", "nbgrader")
    assert proc.returncode == 0, proc.stderr[-3000:]
    grades = _grades(tmp_path / "out")
    for sub in chosen:
        got = {ex.exercise_id: float(grades[sub.student][ex.name])
               for ex in suite["spec"].exercises}
        assert got == sub.expected, (sub.student, got)
    pages = list((tmp_path / "out" / "feedback").glob("*.html"))
    assert len(pages) == len(chosen)
    for page in pages:
        text = page.read_text()
        assert "BEGIN HIDDEN TESTS" not in text and "grading.check" not in text, page.name


def test_outputs_of_a_bad_batch_summary_lms_files_and_report(suite) -> None:
    """Every file that could not be graded is in the summary with its reason; the LMS files and
    the similarity report are written even with the hostile files in the batch."""
    out = suite["out"]
    with open(out / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    report = {row["student_id"]: row for row in rows if row["student_id"]}
    for sub in suite["subs"]:
        if sub.invalid and sub.in_grades:
            assert report[sub.student]["status"].startswith("could not grade"), sub.student
    (linked,) = [row for row in rows if row["file"] == "linked-folder"]
    assert linked["status"] == "not read" and "not followed" in linked["reason"]
    assert not any(row["file"].startswith("linked-folder/") for row in rows)  # never entered
    assert "symbolic link" in report["symlink-to-solution"]["reason"]
    assert "not a regular file" in report["named-pipe"]["reason"]
    assert "levels deep" in report["deep-json"]["reason"]
    assert report["malformed-cell"]["reason"].startswith("cell 2 (markdown cell)")
    summary = (out / "summary.html").read_text()
    for sub in suite["subs"]:
        if sub.invalid:
            assert f"<code>{sub.student}{'/' if sub.in_grades else '</code>'}" in summary, \
                sub.student
    odd = (out / "feedback" / "odd-output.html").read_text()
    assert "<script>" not in odd and "&lt;script&gt;" in odd
    for name in ("canvas_grades.csv", "moodle_grades.csv", "similarity.html", "similarity.csv"):
        assert (out / name).stat().st_size > 0, name


def test_similarity_report_flags_the_renamed_copy_and_changes_no_grade(suite) -> None:
    """The renamed copy is linked to the instructor's solution (submitted by "solution" and its
    copies) on every exercise long enough to tell; it still has full marks."""
    import nbformat

    from autograder.report.similarity import MIN_SHARED, normalised_length
    from tests.adversarial.generate import _solution_text

    source = nbformat.read(suite["chapter"].source, as_version=4)
    by_gid = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in source.cells}
    with open(suite["out"] / "similarity.csv", newline="") as f:
        flags = list(csv.DictReader(f))
    long_enough = [ex for ex in suite["spec"].exercises if normalised_length(
        _solution_text(by_gid[ex.solution_grade_id]), ex.release_stub) >= MIN_SHARED]
    assert long_enough, "no exercise of this chapter is long enough for the similarity report"
    for ex in long_enough:
        linked = [row for row in flags if row["exercise"] == ex.name
                  and "renamed-copy" in (row["students_a"] + ";" + row["students_b"]).split(";")
                  and "solution" in (row["students_a"] + ";" + row["students_b"]).split(";")]
        assert linked, f"{ex.name}: the renamed copy of the solution is not flagged"
    assert float(_grades(suite["out"])["renamed-copy"]["total"]) == suite["spec"].max_total


def test_an_lms_zip_with_link_entries_is_graded_without_following_them(suite, tmp_path) -> None:
    """An LMS zip whose entry named like a student's notebook is a symbolic link (to the
    instructor's source), beside a link to a folder and a malformed notebook: the links are
    reported and never extracted or read, each of those students gets 0 with the reason, and
    the zip's other student is graded as usual."""
    import stat
    import zipfile

    chapter = suite["chapter"]
    by_name = {s.student: s for s in suite["subs"]}

    def link(name: str, target: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name)
        info.create_system = 3  # Unix: the mode below is read
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        return info

    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr(link(f"export/zip-link/{chapter.source.name}", str(chapter.source)),
                   str(chapter.source))
        f.writestr(link("export/zip-folder-link", str(chapter.source.parent)),
                   str(chapter.source.parent))
        f.writestr(f"export/zip-malformed/{chapter.source.name}", by_name["malformed-cell"].content)
        f.writestr(f"export/zip-blank/{chapter.source.name}", by_name["blank"].content)
    out = tmp_path / "out"
    proc = _grade(chapter, suite["env"], z, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    grades = _grades(out)
    assert sorted(grades) == ["zip-blank", "zip-link", "zip-malformed"]
    assert all(float(row["total"]) == 0 for row in grades.values())
    with open(out / "report.csv", newline="") as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    assert rows[f"zip-blank/{chapter.source.name}"]["status"] == "graded"
    linked = rows[f"zip-link/{chapter.source.name}"]
    assert linked["status"] == "could not grade" and "symbolic link" in linked["reason"]
    assert rows["zip-folder-link"]["status"] == "not read"
    assert "symbolic link" in rows["zip-folder-link"]["reason"]
    assert rows[f"zip-malformed/{chapter.source.name}"]["reason"].startswith("cell 2 (markdown")
    extracted = out / "work" / "extracted"
    assert not any(p.is_symlink() for p in extracted.rglob("*"))
    assert not (extracted / "export" / "zip-link").exists()
