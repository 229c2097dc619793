"""The PrairieLearn question (``python -m autograder prairielearn``), run as its external grader
runs it: a fresh root (see tests/test_autograder_gradescope.py) holding ``/grade/data/data.json``,
``/grade/student/<file>``, ``/grade/tests/`` (the question's ``tests/``) and ``/grade/results/``;
the entrypoint info.json names runs for the same five submissions of chapter 1 (Colab's
``seq2seq (1).ipynb`` among them, accepted by the upload's ``file-patterns`` and found under it
by the grader), and each ``/grade/results/results.json`` must validate against PrairieLearn's
documented layout and carry exactly the points of the hardened engine (``score`` = total / max).
The fast tests check what PrairieLearn documents for the question: ``timeout`` at most 600 s,
an ``--image`` it can pull (required), the image's ``linux/amd64`` build and Sync step, the
upload's ``file-patterns``."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from coursebook.chapters import find_chapter
from tests.test_autograder_gradescope import (
    CHAPTER,
    SUBMISSIONS,
    fresh_root_command,
    hardened_grades,
    needs_bwrap,
    submissions,
)


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> Path:
    from autograder.cli import main

    out = tmp_path_factory.mktemp("prairielearn")
    assert main(["prairielearn", CHAPTER, "--out", str(out), "--allow-dirty",
                 "--image", "example/grader:1", "--timeout", "480"]) == 0
    return out / CHAPTER


def run_prairielearn(question: Path, tmp: Path, name: str, fname: str, data: bytes,
                     venv: Path) -> dict:
    """One submission through the entrypoint in PrairieLearn's layout; its results.json."""
    info = json.loads((question / "info.json").read_text())
    entrypoint = info["externalGradingOptions"]["entrypoint"]
    root = tmp / f"pl-{name}"
    shutil.copytree(question / "tests", root / "tests")
    (root / "student").mkdir(parents=True)
    (root / "student" / fname).write_bytes(data)
    (root / "data").mkdir()
    (root / "data" / "data.json").write_text(json.dumps({
        "params": {}, "correct_answers": {}, "submitted_answers": {"_files": [
            {"name": fname, "contents": "(base64 of the file)"}]}, "format_errors": {},
        "partial_scores": {}, "score_feedback": {}, "variant_seed": 1, "options": {},
        "raw_submitted_answers": {}, "editable": False, "panel": "question",
        "extensions": {}, "num_valid_submissions": 1}))
    (root / "results").mkdir()
    proc = subprocess.run(fresh_root_command({"/grade": root}, venv, [entrypoint]),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = root / "results" / "results.json"
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_question_directory(question: Path) -> None:
    info = json.loads((question / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["type"] == "v3"
    options = info["externalGradingOptions"]
    assert options == {"enabled": True, "image": "example/grader:1",
                       "entrypoint": "/grade/tests/run.sh", "timeout": 480}
    assert (question / "tests" / "run.sh").stat().st_mode & 0o111
    html = (question / "question.html").read_text()
    assert '<pl-file-upload file-patterns="*seq2seq*.ipynb">' in html
    assert "file-names" not in html and "5 MB" in html
    assert "<pl-external-grader-results>" in html
    pattern = json.loads((question / "tests" / "bundle.json").read_text())["settings"][
        "upload_pattern"]
    for name in ("seq2seq.ipynb", "seq2seq (1).ipynb", "Copy of seq2seq.ipynb",
                 "seq2seq (2).ipynb"):
        assert fnmatch.fnmatchcase(name, pattern), name
    for name in ("seq2seq.py", "attention.ipynb", "seq2seq.ipynb.zip"):
        assert not fnmatch.fnmatchcase(name, pattern), name
    assert (question / "clientFilesQuestion" / "seq2seq.ipynb").exists()
    for path in ("course/course_lib/grading/__init__.py",
                 "course/solutions/01-seq2seq/seq2seq.ipynb", "bundle.json", "setup.sh"):
        assert (question / "tests" / path).exists(), path
    dockerfile = (question.parent / f"{CHAPTER}-grader-image" / "Dockerfile").read_text()
    assert "setup.sh" in dockerfile and "example/grader:1" in dockerfile
    assert "docker build --platform linux/amd64 -t example/grader:1 ." in dockerfile
    assert "docker push example/grader:1" in dockerfile and "Docker images" in dockerfile


@pytest.mark.parametrize(("args", "error"), [
    (["--timeout", "601"], "1 to 600 seconds"),
    (["--timeout", "900"], "1 to 600 seconds"),
    (["--timeout", "0"], "1 to 600 seconds"),
    (["--timeout", "300"], "no room for the notebook"),
    (["--timeout", "400", "--notebook-timeout", "350"], "no room for the notebook"),
    ([], "--image is required"),
    (["--image", ""], "--image is required"),
    (["--image", "Example/Grader"], "not an image name"),
    (["--image", "registry.example.edu:5000/grader:1"], "PrairieLearn pulls only from"),
])
def test_a_question_prairielearn_would_refuse_is_not_built(tmp_path: Path, capsys, args: list,
                                                           error: str) -> None:
    """PrairieLearn's documented limits (docs/externalGrading.md: ``image`` required, ``timeout``
    cannot exceed 600 s; docs/dockerImages.md: the registries it pulls from) refused with the
    reason, and nothing written."""
    from autograder.cli import main

    image = [] if any(a == "--image" for a in args) or error == "--image is required" else [
        "--image", "example/grader:1"]
    assert main(["prairielearn", CHAPTER, "--out", str(tmp_path), "--allow-dirty",
                 *image, *args]) == 2
    assert error in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_largest_timeout_and_a_pinned_registry_are_accepted(tmp_path: Path) -> None:
    from autograder.cli import main

    assert main(["prairielearn", CHAPTER, "--out", str(tmp_path), "--allow-dirty",
                 "--image", "ghcr.io/example/grader:2026a", "--timeout", "600"]) == 0
    info = json.loads((tmp_path / CHAPTER / "info.json").read_text())
    assert info["externalGradingOptions"]["timeout"] == 600
    assert info["externalGradingOptions"]["image"] == "ghcr.io/example/grader:2026a"


def test_the_grader_takes_the_file_the_upload_pattern_accepted(tmp_path: Path) -> None:
    from autograder.prairielearn import find_upload, upload_pattern

    attribute, pattern = upload_pattern("seq2seq")
    assert attribute == "*seq2seq*.ipynb"
    student = tmp_path / "student"
    student.mkdir()
    assert find_upload(student, pattern) is None
    (student / "notes.ipynb").write_text("{}")
    (student / "seq2seq (1).ipynb").write_text("{}")
    assert find_upload(student, pattern).name == "seq2seq (1).ipynb"
    (student / "Copy of seq2seq.ipynb").symlink_to(student / "notes.ipynb")  # never followed
    assert find_upload(student, pattern).name == "seq2seq (1).ipynb"
    (student / "SEQ2SEQ.ipynb").write_text("{}")  # file-patterns is case-sensitive
    assert find_upload(student, pattern).name == "seq2seq (1).ipynb"
    (student / "seq2seq.ipynb").write_text("{}")  # two match: the grader's own search decides
    assert find_upload(student, pattern) is None
    assert upload_pattern("a*b")[0] == "*a\\*b*.ipynb"  # escaped as PrairieLearn asks


@pytest.mark.parametrize("what", ["truncated", "none"])
def test_an_ungradable_file_is_not_gradable(question: Path, tmp_path: Path, what: str,
                                            monkeypatch) -> None:
    """In-process (no kernel starts for a file that cannot be graded); the truncated file is
    Colab's ``seq2seq (1).ipynb`` beside another notebook: the one the pattern accepts is read."""
    from autograder.prairielearn import RESULTS_SCHEMA, run

    root = tmp_path / "grade"
    shutil.copytree(question / "tests", root / "tests")
    (root / "student").mkdir()
    if what == "truncated":
        raw = find_chapter(CHAPTER).source.read_bytes()
        (root / "student" / "seq2seq (1).ipynb").write_bytes(raw[: len(raw) // 3])
        # newer and named like the chapter (the grader's own search would take it), but not
        # the upload: file-patterns is case-sensitive
        (root / "student" / "SEQ2SEQ final.ipynb").write_bytes(raw)
        os.utime(root / "student" / "seq2seq (1).ipynb", (1e9, 1e9))
    monkeypatch.syspath_prepend(str(root / "tests" / "course"))
    assert run(root) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(data, RESULTS_SCHEMA)
    assert data["gradable"] is False and data["score"] == 0
    assert ("JSON" if what == "truncated" else "no .ipynb") in data["format_errors"][0]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.xdist_group("platform-prairielearn")
def test_entrypoint_in_prairielearn_layout_gives_the_hardened_points(
        question: Path, tmp_path: Path) -> None:
    from autograder.chapter_spec import load_chapter_spec
    from autograder.prairielearn import RESULTS_SCHEMA

    chapter = find_chapter(CHAPTER)
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source,
                             chapter.release)
    subs = submissions(tmp_path)
    grades = hardened_grades(tmp_path, subs)
    for name in SUBMISSIONS:
        fname, data = subs[name]
        results = run_prairielearn(question, tmp_path, name, fname, data, Path(sys.prefix))
        jsonschema.validate(results, RESULTS_SCHEMA)
        want = grades[name]
        if want["status"] != "graded":
            assert results["gradable"] is False and results["format_errors"], name
            continue
        assert results["gradable"] is True, (name, results)
        got = {ex.exercise_id: t["points"] for ex, t in zip(spec.exercises, results["tests"])}
        assert [t["name"] for t in results["tests"]] == [ex.name for ex in spec.exercises]
        assert got == want["points"], (name, [t["message"] for t in results["tests"]])
        assert [t["max_points"] for t in results["tests"]] == [ex.points for ex in spec.exercises]
        assert results["score"] == pytest.approx(want["total"] / spec.max_total, abs=1e-12)
        for ex, t in zip(spec.exercises, results["tests"]):
            assert ex.hidden_test.strip() not in t["output"] + t["message"]
