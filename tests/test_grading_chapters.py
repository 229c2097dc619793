"""Every chapter through stock nbgrader: the solution earns full marks, the blank release zero.

The blank release now runs top to bottom without an error (a blank exercise's test cell says "not
attempted yet"), so this guards the other half of that promise: every grader still gives an
unattempted exercise 0. Stock nbgrader's ``autograde`` sets ``NBGRADER_EXECUTION`` (the visible
tests then raise on a blank exercise). The hardened grader (record mode) grades the same two
copies, and five more, in tests/test_autograder_chapters.py.

Each chapter is released here from its source (what `make release` writes), in quick mode.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest

from autograder.paths import REPO, Chapter, find_chapters
from tests.adversarial.generate import load, solved_release

pytestmark = [pytest.mark.slow]

CHAPTERS = [c.name for c in find_chapters()]


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory) -> dict:
    from autograder.release import release

    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    chapter = Chapter(name, REPO / "solutions", tmp / "release")
    release([chapter])
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
           "--source-root", str(chapter.source_root), "--release-root",
           str(chapter.release_root), "--no-progress", "--engine", "nbgrader"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    return {"spec": spec, "grades": grades}


def test_solution_full_marks_blank_zero(graded: dict) -> None:
    spec, grades = graded["spec"], graded["grades"]
    for ex in spec.exercises:
        assert float(grades["solution"][ex.name]) == ex.points, ("nbgrader", "solution", ex.name)
        assert float(grades["blank"][ex.name]) == 0.0, ("nbgrader", "blank", ex.name)
