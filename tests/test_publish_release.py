"""``python -m publish release`` and ``check``: nbgrader's generate_assignment, deterministic and
readable bytes, the drift check, and a release that never rewrites a hand-edited file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coursebook import REPO, Chapter, all_chapters, find_chapter, notebooks
from publish.drift import drifted
from publish.errors import ReleaseError
from publish.release import generate_release, release
from publish.repository import repository_url
from publish.site import Site

FIXTURES = REPO / "tests" / "fixtures"
PY = sys.executable
OLD_URL = "git+https://github.com/someone-else/old-course"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "publish", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def _fixture(root: Path) -> Chapter:
    """The fixture chapter, its source read from tests/fixtures, its copies generated under root."""
    return find_chapter("00-fixture", FIXTURES).generated_under(root)


@pytest.fixture(scope="module")
def fixture_release(tmp_path_factory: pytest.TempPathFactory) -> Chapter:
    chapter = _fixture(tmp_path_factory.mktemp("release"))
    release([chapter])
    return chapter


def test_release_is_byte_identical_across_runs(fixture_release: Chapter) -> None:
    first = fixture_release.release.read_bytes()
    assert notebooks.dumps(generate_release(fixture_release.source, "00-fixture")).encode() == first
    before = fixture_release.release.stat().st_mtime_ns
    assert release([fixture_release]) == [], "unchanged bytes are not rewritten"
    assert fixture_release.release.stat().st_mtime_ns == before


def test_release_stores_one_source_line_per_line(fixture_release: Chapter) -> None:
    for path in (fixture_release.release, fixture_release.colab):
        raw = json.loads(path.read_text())
        sources = [c["source"] for c in raw["cells"]]
        assert all(isinstance(s, list) for s in sources), path
        assert all(line.count("\n") <= 1 for s in sources for line in s), path
        assert any(len(s) > 3 for s in sources), "a multi-line cell is stored line by line"


def test_release_removes_solutions_and_hidden_tests_keeps_metadata(fixture_release: Chapter
                                                                   ) -> None:
    nb = notebooks.read(fixture_release.release)
    src = notebooks.read(fixture_release.source)
    assert [c["id"] for c in nb.cells] == [c["id"] for c in src.cells]
    text = "".join(notebooks.source(c) for c in nb.cells)
    assert "BEGIN HIDDEN TESTS" not in text and "grading.check" not in text
    assert "BEGIN SOLUTION" not in text and "masked_fill" not in text
    assert text.count("raise NotImplementedError()") == 2
    by_id = {c["id"]: c for c in nb.cells}
    test = by_id["ex1-test"]
    assert notebooks.nbgrader(test)["grade_id"] == "masked_softmax_test"
    assert notebooks.nbgrader(test)["points"] == 2
    assert notebooks.tags(test) == ["raises-exception", "remove-output"]
    assert notebooks.nbgrader(by_id["ex1-solution"])["solution"] is True
    assert notebooks.tags(by_id["setup"]) == ["setup"]
    assert nb.nbformat == 4 and nb.nbformat_minor == 5
    assert all(c.get("outputs", []) == [] for c in nb.cells)
    assert "visible tests passed" in notebooks.source(test)  # the visible part of the test stays


def test_check_names_the_drifted_chapter(tmp_path: Path) -> None:
    chapter = _fixture(tmp_path)
    assert drifted([chapter]) == [f"00-fixture: {chapter.release} is missing",
                                  f"00-fixture: its Colab copy {chapter.colab} is missing"]
    assert release([chapter]) == [chapter.release, chapter.colab]
    assert drifted([chapter]) == []
    nb = notebooks.read(chapter.release)
    nb.cells[0]["source"] = "# edited by hand"
    notebooks.write(nb, chapter.release)
    assert drifted([chapter]) == [f"00-fixture: {chapter.release} differs from the release of "
                                  f"{chapter.source}"]
    release([chapter])
    colab = chapter.colab.read_text()
    chapter.colab.write_text(colab.replace('"# 0. Fixture chapter', '"# 0. Fixture chapter!', 1))
    assert drifted([chapter]) == [f"00-fixture: {chapter.colab} differs from the Colab copy of "
                                  "its release and _data/measured/fixture.json"]


def test_a_reformatted_release_is_drift(tmp_path: Path) -> None:
    """Same content, other bytes (one JSON string per cell, as before nbformat wrote it): drift."""
    chapter = _fixture(tmp_path)
    release([chapter])
    raw = json.loads(chapter.release.read_text())
    for cell in raw["cells"]:
        cell["source"] = "".join(cell["source"])
    chapter.release.write_text(json.dumps(raw, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    assert len(drifted([chapter])) == 1


def _layout_with_stale_urls(root: Path) -> tuple[Site, Chapter, list[Path]]:
    """A copy of the repository's layout in ``root`` whose README and fixture source name
    another repository than its ``_config.yml``."""
    for name in ("_config.yml", "README.md"):
        shutil.copyfile(REPO / name, root / name)
    shutil.copytree(REPO / "bib", root / "bib")
    shutil.copytree(FIXTURES / "solutions" / "00-fixture", root / "solutions" / "00-fixture")
    (chapter,) = all_chapters(root)
    readme = root / "README.md"
    readme.write_text(readme.read_text() + f"\nOr: `pip install \"course-lib @ {OLD_URL}\"`\n")
    nb = notebooks.read(chapter.source)
    setup = next(c for c in nb.cells if c["id"] == "setup")
    setup["source"] = f'# pip install "course-lib @ {OLD_URL}"\n' + setup["source"]
    notebooks.write(nb, chapter.source)
    return Site(root), chapter, [readme, chapter.source]


def test_release_never_rewrites_a_stale_hand_edited_file(tmp_path: Path) -> None:
    site, chapter, stale = _layout_with_stale_urls(tmp_path)
    before = {path: path.read_bytes() for path in stale}
    with pytest.raises(ReleaseError) as err:
        release([chapter], site)
    message = str(err.value)
    readme_line = len(stale[0].read_text().splitlines())  # the line appended last
    source_line = next(i for i, line in enumerate(stale[1].read_text().splitlines(), start=1)
                       if OLD_URL in line)
    assert f"{stale[0]}:{readme_line}: {OLD_URL}" in message
    assert f"{stale[1]}:{source_line}: {OLD_URL}" in message
    assert "edit each line to git+https://github.com/attention-course/" in message
    assert {path: path.read_bytes() for path in stale} == before, "hand-edited files untouched"
    assert not chapter.release.exists() and not chapter.colab.exists(), "nothing written"
    assert [line.split(": ")[0] for line in drifted([chapter], site)[:2]] == [
        f"{stale[1]}:{source_line}", f"{stale[0]}:{readme_line}"]
    # each line edited as the message says: release writes the generated files and nothing else
    url = f"git+{repository_url(site.config)}"
    for path in stale:
        path.write_text(path.read_text().replace(OLD_URL, url))
    edited = {path: path.read_bytes() for path in stale}
    assert release([chapter], site) == [chapter.release, chapter.colab]
    assert {path: path.read_bytes() for path in stale} == edited
    assert drifted([chapter], site) == []


@pytest.mark.slow
def test_cli_release_and_check(tmp_path: Path) -> None:
    chapters = tmp_path / "chapters"
    roots = ["--source-root", str(FIXTURES / "solutions"), "--release-root", str(chapters)]
    ok = _run("release", "00", *roots)
    assert ok.returncode == 0, ok.stderr
    assert (chapters / "00-fixture" / "fixture.ipynb").exists()
    assert (tmp_path / "colab" / "00-fixture" / "fixture.ipynb").exists()
    assert _run("check", *roots).returncode == 0
    (chapters / "00-fixture" / "fixture.ipynb").write_text("{}")
    bad = _run("check", *roots)
    assert bad.returncode == 1 and "00-fixture" in bad.stderr
    unknown = _run("release", "99-nothing", *roots)
    assert unknown.returncode != 0 and "99-nothing" in unknown.stderr
    misnamed = _run("release", "--release-root", str(tmp_path / "out"))
    assert misnamed.returncode != 0 and "must be named chapters/" in misnamed.stderr


@pytest.mark.slow
def test_committed_chapters_are_in_sync_with_solutions(tmp_path: Path) -> None:
    """chapters/ and colab/ are what `make release` writes from solutions/, for every chapter."""
    chapters = list(all_chapters())
    lines = drifted(chapters)
    assert lines == [], "\n".join(lines) + "\nrun `make release` and commit chapters/ and colab/"
    # the check itself can fail: a copy with one chapter edited is reported
    copy = chapters[0].generated_under(tmp_path)
    for name in ("release", "colab", "measured"):
        getattr(copy, name).parent.mkdir(parents=True)
        shutil.copyfile(getattr(chapters[0], name), getattr(copy, name))
    assert drifted([copy]) == []
    copy.release.write_text(copy.release.read_text().replace('"cells"', '"cells" ', 1))
    assert drifted([copy]) == [f"{copy.slug}: {copy.release} differs from the release of "
                               f"{copy.source}"]


@pytest.mark.slow
def test_cli_root_publishes_a_copy_of_the_layout(tmp_path: Path, capsys) -> None:
    from publish.cli import main

    shutil.copytree(FIXTURES / "solutions" / "00-fixture", tmp_path / "solutions" / "00-fixture")
    assert main(["check", "--root", str(tmp_path)]) == 1
    assert "fixture.ipynb is missing" in capsys.readouterr().err
    assert main(["release", "00", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "chapters" / "00-fixture" / "fixture.ipynb").exists()
    assert (tmp_path / "colab" / "00-fixture" / "fixture.ipynb").exists()
    assert main(["check", "--root", str(tmp_path)]) == 0
    assert "in sync: 00-fixture" in capsys.readouterr().out
    assert main(["release", "--root", str(tmp_path)]) == 0
    assert "unchanged: 00-fixture" in capsys.readouterr().out
