"""The HTML pages of a grading run escape every student-controlled string.

A student chooses their folder name (their student id), their file name, and what their code
prints or raises; the feedback page and the instructor's summary show all of them. Rendered
from Jinja2 templates with autoescape on, none of it can run as markup in the page.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.chapter_spec import ChapterSpec, ExerciseSpec
from autograder.report.feedback import render_feedback
from autograder.report.summary import write_summary
from autograder.results import CellLog, ExerciseOutcome, FileRow, GradeResult

HOSTILE = "<script>alert('x')</script>\"'><img src=x onerror=alert(1)>"


@pytest.fixture()
def spec() -> ChapterSpec:
    return ChapterSpec("01-seq2seq", "seq2seq", ["setup"], [
        ExerciseSpec("seq2seq.a", "a", "a", "a", "test_a", None, None, 2.0, "", "")])


@pytest.fixture()
def result() -> GradeResult:
    r = GradeResult(f"student{HOSTILE}", f"{HOSTILE}/seq2seq.ipynb", "", "", "hardened",
                    status="could not grade", reason=f"the file {HOSTILE} is bad",
                    notes=[f"note {HOSTILE}"])
    r.exercises["seq2seq.a"] = ExerciseOutcome(
        "seq2seq.a", 0.0, 2.0, "failed", [f"case 1: {HOSTILE}"], [f"repair {HOSTILE}"],
        [CellLog(f"your cell {HOSTILE}", f"print({HOSTILE!r})", f"out {HOSTILE}",
                 f"ValueError: {HOSTILE}")])
    return r


def _assert_escaped(page: str) -> None:
    assert "<script" not in page and "<img" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&#34;&#39;&gt;&lt;img" in page


def test_feedback_page_escapes_id_file_and_messages(spec, result) -> None:
    page = render_feedback(spec, result)
    _assert_escaped(page)
    for part in ("student&lt;script", "the file &lt;script", "note &lt;script", "case 1: &lt;",
                 "repair &lt;", "your cell &lt;", "out &lt;", "ValueError: &lt;"):
        assert part in page, part


def test_summary_page_escapes_id_file_and_messages(tmp_path: Path, spec, result) -> None:
    graded = GradeResult("s1", "s1/seq2seq.ipynb", "", "", "hardened")
    graded.exercises["seq2seq.a"] = ExerciseOutcome("seq2seq.a", 0.0, 2.0, "failed",
                                                    [f"case 1 (x): {HOSTILE}"])
    rows = [FileRow(result.file, result.student_id, HOSTILE, "could not grade", result.reason),
            FileRow(f"{HOSTILE}.ipynb", "", "", f"not mapped {HOSTILE}", HOSTILE)]
    write_summary(tmp_path / "summary.html", spec, [result, graded], rows)
    page = (tmp_path / "summary.html").read_text()
    _assert_escaped(page)
    assert "Files that could not be graded (2)" in page
    assert "<td>1</td><td>&lt;script&gt;" in page  # the failure kind, counted once
