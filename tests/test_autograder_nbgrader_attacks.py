"""The stock nbgrader engine (``--engine nbgrader``) under issue 27's three attacks, in one run.

Stock nbgrader runs the student's code in the kernel that judges it, so whatever that kernel holds
the notebook can change. This file documents what that means, honestly, with chapter 1's real
release (its hidden cases mix the grading secret into their seeds):

* ``patched-check``: the blank release plus one cell that replaces ``grading.check`` and
  ``grading.visible_tests``: full marks. It succeeds, and the engine is not offered for grades.
* ``guard-off``: every solution switches the profiler guard off, then calls course_lib's
  reference: every exercise with a reference earns its points. It succeeds too.
* ``preset-secret``: ``os.environ["COURSE_GRADING_SECRET"]`` preset in the notebook, and every
  solution a table of course_lib's outputs built offline under that secret (the hidden cases and
  the visible tests' calls): 0, the secret is never read from the environment.
* ``preset-module-secret``: the same table, the secret written into
  ``course_lib.exercises._common``'s state in the kernel instead: it earns the table's points
  (the control that the table works: any state in the judging kernel is the student's).

And the command says all this: its stderr when grading starts, its closing summary, summary.html
and every feedback page state that the engine's grades are not tamper-proof and name the hardened
engine. The hardened engine's own attacks are tests/test_autograder_chapters.py's.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
from typing import Any

import nbformat
import pytest
import torch

from autograder.results import NOT_TAMPER_PROOF
from course_lib import grading
from coursebook.chapters import REPO, all_chapters
from tests.adversarial import memorised
from tests.adversarial.chapters import released_copy
from tests.adversarial.generate import load, with_solution_cells


def _slow(test):
    """The tests of the grading run (one stock-nbgrader run of chapter 1, minutes); the others
    are fast."""
    return pytest.mark.slow(pytest.mark.xdist_group("nbgrader-attacks")(test))


#: The secret the student chose and built the table with, offline.
GUESS = "the-students-own-secret"

PATCH_CELL = """import contextlib
from course_lib import grading
grading.check = lambda *args, **kwargs: None
grading.visible_tests = lambda *args, **kwargs: contextlib.suppress(Exception)
"""


def _visible_calls(spec: Any, ex: Any, reg: grading.Exercise) -> dict[str, str]:
    """The table entries of the calls ``ex``'s visible tests make (run here, offline, with
    course_lib's reference recording), as a student who reads the test cell would build them."""
    table: dict[str, str] = {}

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = reg.reference(*args, **kwargs)
        buf = io.BytesIO()
        torch.save(out, buf)
        table[memorised.memo_key(args, kwargs)] = base64.b64encode(buf.getvalue()).decode()
        return out

    namespace: dict[str, Any] = {}
    for code in spec.setup:
        exec("\n".join(line for line in code.split("\n")  # noqa: S102 - the chapter's own setup
                       if not line.lstrip().startswith(("%", "!"))), namespace)
    namespace[ex.function] = recording
    exec(ex.visible_test, namespace)  # noqa: S102 - the chapter's own visible test
    return table


def _notebooks(chapter, spec) -> dict[str, nbformat.NotebookNode]:
    release = nbformat.read(chapter.release, as_version=4)
    by_sol = spec.by_solution_grade_id()
    setup_at = max(i for i, c in enumerate(release.cells)
                   if "setup" in c.metadata.get("tags", []))

    def with_cells(body, first: str | None = None) -> nbformat.NotebookNode:
        nb = with_solution_cells(release, by_sol, body)
        if first is not None:
            nb.cells.insert(setup_at + 1, nbformat.v4.new_code_cell(first))
        return nb

    def guard_off(ex):
        return (f"def {ex.function}(*args, **kwargs):\n    import sys, threading\n"
                "    sys.setprofile(None)\n    threading.setprofile(None)\n"
                "    from course_lib import grading\n"
                f"    return grading.get_exercise({ex.exercise_id!r}).reference(*args, **kwargs)\n")

    tables = {}
    for ex in spec.exercises:
        reg = grading.get_exercise(ex.exercise_id)
        if memorised.memorisable(reg):
            with memorised.secret(GUESS):
                tables[ex.exercise_id] = {**memorised.build_table(reg),
                                          **_visible_calls(spec, ex, reg)}

    def table_cell(ex):
        table = tables.get(ex.exercise_id)
        return None if table is None else memorised.cell_source(ex.function, table)

    env_preset = f"import os\nos.environ['COURSE_GRADING_SECRET'] = {GUESS!r}\n"
    module_preset = ("from course_lib.exercises import _common\n"
                     f"_common._PROCESS_SECRET[:] = [{GUESS!r}]\n")
    return {"blank": release,
            "patched-check": with_cells(lambda ex: None, PATCH_CELL),
            "guard-off": with_cells(guard_off),
            "preset-secret": with_cells(table_cell, env_preset),
            "preset-module-secret": with_cells(table_cell, module_preset)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    chapters = [c for c in all_chapters() if c.number == 1]
    if not chapters:
        pytest.skip("chapter 1's source is not here (its hidden cases mix the secret)")
    tmp = tmp_path_factory.mktemp("nbgrader-attacks")
    chapter = released_copy(chapters[0], tmp / "course")
    spec = load(chapter)
    subs = tmp / "subs"
    notebooks = _notebooks(chapter, spec)
    for student, nb in notebooks.items():
        (subs / student).mkdir(parents=True)
        (subs / student / chapter.release.name).write_text(json.dumps(nb, indent=1))
    out = tmp / "out"
    cmd = [sys.executable, "-m", "autograder", "grade", chapter.slug, str(subs), "--out", str(out),
           "--root", str(chapter.root), "--no-progress", "--engine", "nbgrader"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "COURSE_LIB_QUICK": "1"},
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    points = {sid: {ex.exercise_id: float(row[ex.name]) for ex in spec.exercises}
              for sid, row in grades.items()}
    return {"spec": spec, "proc": proc, "out": out, "points": points, "students": list(notebooks)}


def _with_reference(spec) -> dict[str, float]:
    """``exercise id -> points`` of the exercises course_lib has a reference for (not a letter)."""
    return {ex.exercise_id: ex.points for ex in spec.exercises
            if grading.get_exercise(ex.exercise_id).cases is not grading.answer_case}


@_slow
def test_the_blank_release_earns_nothing(graded) -> None:
    assert set(graded["points"]["blank"].values()) == {0.0}


@_slow
def test_a_preset_secret_in_the_environment_earns_nothing(graded) -> None:
    """The table was built offline under the secret the notebook presets in os.environ: the
    kernel's secret is not read from there, so every hidden case misses the table."""
    memorisable = {eid for eid in _with_reference(graded["spec"])
                   if memorised.memorisable(grading.get_exercise(eid))}
    assert memorisable, "chapter 1 has no exercise a table can stand in for"
    assert graded["points"]["preset-secret"] == {eid: 0.0 for eid in graded["points"]["blank"]}
    # the control: the same table with the secret written into the kernel's course_lib state
    # passes (so the 0 above is the environment's doing, not a broken table)
    control = graded["points"]["preset-module-secret"]
    assert {eid for eid, p in control.items() if p > 0} == memorisable


@_slow
def test_a_replaced_check_earns_full_marks_under_the_stock_engine(graded) -> None:
    """Documented, not defended: the judging kernel runs the student's cell first."""
    full = {ex.exercise_id: ex.points for ex in graded["spec"].exercises}
    assert graded["points"]["patched-check"] == full


@_slow
def test_the_guard_switched_off_earns_the_references_points_under_the_stock_engine(graded):
    """Documented, not defended: sys.setprofile(None) removes the guard in the judging kernel."""
    got = graded["points"]["guard-off"]
    assert got == {eid: _with_reference(graded["spec"]).get(eid, 0.0) for eid in got}


@_slow
def test_the_command_says_its_grades_are_not_tamper_proof(graded) -> None:
    proc, out = graded["proc"], graded["out"]
    assert f"warning: {NOT_TAMPER_PROOF}" in proc.stderr  # when grading starts
    assert f"warning: {NOT_TAMPER_PROOF}" in proc.stdout  # the closing summary
    assert "NOT tamper-proof" in NOT_TAMPER_PROOF and "--engine hardened" in NOT_TAMPER_PROOF
    assert "grading.check" not in NOT_TAMPER_PROOF  # feedback pages never name the hidden call
    pages = [out / "summary.html", *sorted((out / "feedback").glob("*.html"))]
    assert len(pages) == 1 + len(graded["students"])
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "are NOT tamper-proof" in text and "--engine hardened" in text, page.name


def test_the_guide_does_not_offer_the_stock_engine_for_grades() -> None:
    guide = (REPO / "instructors.md").read_text(encoding="utf-8")
    readme = (REPO / "autograder" / "README.md").read_text(encoding="utf-8")
    assert "**Do not use `--engine nbgrader`\nfor grades.**" in guide
    assert "not tamper-proof" in readme and "not tamper-proof" in guide
    assert "baseline and a cross-check" in guide and "baseline and a cross-check" in readme


def test_the_secret_is_not_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: presetting the environment variable changes no hidden input."""
    from course_lib.exercises import _common

    before = _common.mix(7)
    monkeypatch.setenv("COURSE_GRADING_SECRET", GUESS)
    assert _common.mix(7) == before
    with _common.using_secret(GUESS):
        assert _common.mix(7) != before


def test_the_pages_carry_the_statement_for_the_stock_engine_only(tmp_path) -> None:
    """Fast: summary.html and our feedback page (a file stock nbgrader could not grade) say it
    for the stock engine, not for the hardened one; nbgrader's own page gets the banner."""
    from autograder.chapter_spec import ChapterSpec, ExerciseSpec
    from autograder.report.feedback import render_feedback
    from autograder.report.summary import write_summary
    from autograder.results import GradeResult
    from autograder.run.engine_nbgrader import add_banner

    ex = ExerciseSpec("toy.f", "f", "f", "f", "f_test", None, None, 1.0, "", "")
    spec = ChapterSpec("00-toy", "toy", [], [ex])
    for engine, shown in (("nbgrader", True), ("hardened", False)):
        r = GradeResult.new("s<1>", "s1.ipynb", "ab", "cd", engine, 1.0).finish({"toy.f": 1.0})
        write_summary(tmp_path / "summary.html", spec, [r], [])
        for text in ((tmp_path / "summary.html").read_text(), render_feedback(spec, r)):
            assert ("are NOT tamper-proof" in text) == shown, engine
    page = add_banner('<html><head></head><body class="x"><h1>s1</h1></body></html>')
    assert page.index("NOT tamper-proof") < page.index("<h1>") and page.count("<body") == 1
