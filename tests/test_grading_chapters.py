"""Every chapter through stock nbgrader: the solution earns full marks, the blank release zero.

The blank release now runs top to bottom without an error (a blank exercise's test cell says "not
attempted yet"), so this guards the other half of that promise: every grader still gives an
unattempted exercise 0. Stock nbgrader's ``autograde`` sets ``NBGRADER_EXECUTION`` (the visible
tests then raise on a blank exercise). The hardened grader (record mode) grades the same two
copies, and seven more, in tests/test_autograder_chapters.py.

Each chapter is released here from its source (what `make release` writes), in quick mode, and
its two copies are autograded once (a module-scoped fixture per chapter, one xdist group each);
every check reads that run's grades or the notebooks nbgrader executed:

* the solution: full marks, and no cell of the whole notebook raises (nbgrader runs the solved
  release with the source's hidden tests put back, i.e. the instructor's source, so this covers
  what an nbval run of the source checked, with the grades on top);
* the blank release: zero, every test cell raising ``NotImplementedError`` (the blank stub's,
  not some other error) and no other cell raising.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest

from coursebook.chapters import REPO, all_chapters, find_chapter
from tests.adversarial.chapters import released_copy
from tests.adversarial.generate import load, solved_release

pytestmark = [pytest.mark.slow]

CHAPTERS = [c.slug for c in all_chapters()]


@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=pytest.mark.xdist_group(f"nbgrader-{name}")) for name in CHAPTERS])
def graded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The chapter's solution and blank release autograded by stock nbgrader, in one run."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    chapter = released_copy(find_chapter(name), tmp / "course")
    spec = load(chapter)
    rel = nbformat.read(chapter.release, as_version=4)
    src = nbformat.read(chapter.source, as_version=4)
    subs = tmp / "subs"
    for student, nb in (("solution", solved_release(rel, src)), ("blank", rel)):
        (subs / student).mkdir(parents=True)
        (subs / student / chapter.release.name).write_text(json.dumps(nb, indent=1))
    env = {**os.environ, "COURSE_LIB_QUICK": "1"}
    out = tmp / "out-nbgrader"
    cmd = [sys.executable, "-m", "autograder", "grade", name, str(subs), "--out", str(out),
           "--root", str(chapter.root), "--no-progress", "--engine", "nbgrader"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    executed = out / "work" / "nbgrader-course" / "autograded"
    notebooks = {student: nbformat.read(executed / student / name / chapter.release.name,
                                        as_version=4) for student in ("solution", "blank")}
    return {"name": name, "spec": spec, "grades": grades, "executed": notebooks}


def test_solution_full_marks_blank_zero(graded: dict) -> None:
    spec, grades = graded["spec"], graded["grades"]
    for ex in spec.exercises:
        assert float(grades["solution"][ex.name]) == ex.points, ("nbgrader", "solution", ex.name)
        assert float(grades["blank"][ex.name]) == 0.0, ("nbgrader", "blank", ex.name)


def _errors(nb: nbformat.NotebookNode) -> dict[int, tuple[str, str]]:
    """``{cell index: (exception name, grade id or "")}`` for every code cell that raised."""
    return {i: (out["ename"], cell.metadata.get("nbgrader", {}).get("grade_id", ""))
            for i, cell in enumerate(nb.cells) for out in cell.get("outputs", [])
            if out.get("output_type") == "error"}


def test_the_solution_runs_top_to_bottom_without_an_error(graded: dict) -> None:
    nb = graded["executed"]["solution"]
    assert _errors(nb) == {}, f"{graded['name']}: cells that raised under nbgrader"
    hidden = [c for c in nb.cells if "grading.check(" in c.source]
    assert len(hidden) == len(graded["spec"].exercises), "nbgrader ran the hidden tests"


def test_blank_test_cells_raise_not_implemented_and_nothing_else_raises(graded: dict) -> None:
    errors = _errors(graded["executed"]["blank"])
    tests = {ex.test_grade_id for ex in graded["spec"].exercises}
    assert sorted(gid for _, gid in errors.values()) == sorted(tests), \
        f"{graded['name']}: cells that raised: {errors}"
    assert {name for name, _ in errors.values()} == {"NotImplementedError"}, errors
