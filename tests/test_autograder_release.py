"""The release command: nbgrader's generate_assignment, deterministic, and the drift check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.paths import REPO, Chapter, find_chapters
from autograder.release import check_release, generate_release, release

FIXTURE_SOURCES = REPO / "tests" / "fixtures" / "solutions"
PY = sys.executable


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "autograder", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def fixture_release(tmp_path_factory) -> Chapter:
    out = tmp_path_factory.mktemp("release")
    chapter = Chapter("00-fixture", FIXTURE_SOURCES, out / "chapters")
    release([chapter])
    return chapter


def test_release_is_byte_identical_across_runs(fixture_release: Chapter) -> None:
    first = fixture_release.release.read_bytes()
    assert generate_release(fixture_release).encode("utf-8") == first


def test_release_removes_solutions_and_hidden_tests_keeps_metadata(fixture_release: Chapter) -> None:
    nb = json.loads(fixture_release.release.read_text())
    src = json.loads(fixture_release.source.read_text())
    assert [c["id"] for c in nb["cells"]] == [c["id"] for c in src["cells"]]
    text = "".join("".join(c["source"]) for c in nb["cells"])
    assert "BEGIN HIDDEN TESTS" not in text and "grading.check" not in text
    assert "BEGIN SOLUTION" not in text and "masked_fill" not in text
    assert text.count("raise NotImplementedError()") == 2
    by_id = {c["id"]: c for c in nb["cells"]}
    test = by_id["ex1-test"]
    assert test["metadata"]["nbgrader"]["grade_id"] == "masked_softmax_test"
    assert test["metadata"]["nbgrader"]["points"] == 2
    assert test["metadata"]["tags"] == ["raises-exception", "remove-output"]
    assert by_id["ex1-solution"]["metadata"]["nbgrader"]["solution"] is True
    assert by_id["setup"]["metadata"]["tags"] == ["setup"]
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] == 5
    assert all(c.get("outputs", []) == [] for c in nb["cells"])
    # the visible part of the test stays
    assert "visible tests passed" in "".join(test["source"])


def test_check_release_names_the_drifted_chapter(tmp_path: Path) -> None:
    chapter = Chapter("00-fixture", FIXTURE_SOURCES, tmp_path / "chapters")
    colab_copy = tmp_path / "colab" / "00-fixture" / "fixture.ipynb"
    assert check_release([chapter]) == [f"00-fixture: {chapter.release} is missing",
                                         f"00-fixture: its Colab copy {colab_copy} is missing"]
    release([chapter])
    assert colab_copy.exists()
    assert check_release([chapter]) == []
    nb = json.loads(chapter.release.read_text())
    nb["cells"][0]["source"] = "# edited by hand"
    chapter.release.write_text(json.dumps(nb, indent=1))
    drifted = check_release([chapter])
    assert len(drifted) == 1 and drifted[0].startswith("00-fixture:")


@pytest.mark.slow
def test_cli_release_and_check_release(tmp_path: Path) -> None:
    chapters = tmp_path / "chapters"
    roots = ["--source-root", str(FIXTURE_SOURCES), "--release-root", str(chapters)]
    ok = _run("release", "00", *roots)
    assert ok.returncode == 0, ok.stderr
    assert (chapters / "00-fixture" / "fixture.ipynb").exists()
    assert (tmp_path / "colab" / "00-fixture" / "fixture.ipynb").exists()
    assert _run("check-release", *roots).returncode == 0
    (chapters / "00-fixture" / "fixture.ipynb").write_text("{}")
    bad = _run("check-release", *roots)
    assert bad.returncode == 1 and "00-fixture" in bad.stderr
    unknown = _run("release", "99-nothing", *roots)
    assert unknown.returncode != 0 and "99-nothing" in unknown.stderr


@pytest.mark.slow
def test_committed_chapters_are_in_sync_with_solutions(tmp_path: Path) -> None:
    """chapters/ is what `make release` writes from solutions/, for every chapter there is."""
    chapters = find_chapters()
    drifted = check_release(chapters)
    assert drifted == [], "\n".join(drifted) + "\nrun `make release` and commit chapters/"
    # the check itself can fail: a copy with one chapter edited is reported
    for chapter in chapters[:1]:
        copy = Chapter(chapter.name, chapter.source_root, tmp_path / "chapters")
        copy.release.parent.mkdir(parents=True)
        shutil.copyfile(chapter.release, copy.release)
        copy.release.write_text(copy.release.read_text().replace('"cells"', '"cells" ', 1))
        assert check_release([copy]) != []
