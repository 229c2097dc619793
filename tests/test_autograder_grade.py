"""End to end: an LMS zip with a roster, on the fixture chapter, through
`python -m autograder grade`."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from coursebook.chapters import REPO
from tests.adversarial.chapters import FIXTURE, released_copy

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("autograder-grade")]

FIXTURES = REPO / "tests" / "fixtures"


def test_lms_zip_with_roster_maps_grades_and_reports(tmp_path: Path) -> None:
    chapter = released_copy(FIXTURE, tmp_path / "course")
    solution = (FIXTURES / "colab" / "fixture-solution.ipynb").read_bytes()
    blank = chapter.release.read_bytes()
    z = tmp_path / "submissions.zip"
    with zipfile.ZipFile(z, "w") as f:  # Canvas-style flat names
        f.writestr("stoneb_1001_5551_fixture.ipynb", solution)
        f.writestr("leea_LATE_1002_5552_Copy of fixture.ipynb", blank)
        f.writestr("fixture (1).ipynb", solution)  # names nobody
        f.writestr("nobody_9999_5553_fixture.ipynb", solution)  # not on the roster
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,aliases\ns1001,Bob Stone,stoneb\ns1002,Ann Lee,leea\n")
    env = {**os.environ, "AUTOGRADER_EXTRA_EXERCISES": str(FIXTURES / "exercises")}
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "00", str(z), "--roster", str(roster),
         "--out", str(out), "--root", str(chapter.root)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["student_id", "masked_softmax", "attention", "total", "max_total"]
    grades = {r["student_id"]: (r["total"], r["max_total"]) for r in rows}
    assert grades == {"s1001": ("5", "5"), "s1002": ("0", "5")}
    with open(out / "grades_long.csv", newline="") as f:
        long_rows = [tuple(r.values()) for r in csv.DictReader(f)]
    points = {r[0]: 0.0 for r in long_rows}
    for student, _, got, _ in long_rows:
        points[student] += float(got)
    assert {s: f"{p:g}" for s, p in points.items()} == {s: t for s, (t, _) in grades.items()}
    assert sum(float(r[3]) for r in long_rows if r[0] == "s1001") == 5
    assert [r[1] for r in long_rows if r[0] == "s1002"] == ["masked_softmax", "attention"]
    with open(out / "report.csv", newline="") as f:
        report = {r["file"]: r for r in csv.DictReader(f)}
    assert report["fixture (1).ipynb"]["status"] == "not mapped"
    assert report["nobody_9999_5553_fixture.ipynb"]["status"] == "not mapped"
    assert "could not grade 2 file(s)" in proc.stdout
    assert "fixture (1).ipynb" in proc.stdout and "wall time" in proc.stdout
    assert "grading 00-fixture" in proc.stderr  # the progress bar
    assert (out / "score_distribution.png").stat().st_size > 1000
    feedback = (out / "feedback" / "s1001.html").read_text()
    assert "5 / 5" in feedback and "metadata was missing" in feedback  # the Colab repair, stated
    result = json.loads((out / "results" / "s1001.json").read_text())
    assert result["exercises"]["fixture.attention"]["status"] == "passed"
