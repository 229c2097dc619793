"""The measured numbers of the Colab copies' prose (``publish.measured``): recorded from the
executed book by ``python -m publish measure``, written by ``release``, guarded by ``check``.
Runs on the fixture chapter with a fake executed book, so no book is built."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coursebook import Chapter, all_chapters, notebooks
from publish import measured
from publish.cli import main
from publish.drift import drifted
from publish.errors import ReleaseError
from publish.release import release
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "solutions" / "00-fixture"
PROSE = ("A demo: train a linear layer for a while; its loss falls to {glue:text}`fx_loss:.2f` "
         "in {glue:text}`fx_steps:,` steps, {glue:text}`fx_share:.0%` of the first loss.")


@pytest.fixture()
def chapter(tmp_path: Path) -> Chapter:
    """The fixture chapter, its demo's prose citing three glued values, released in ``tmp_path``."""
    src = tmp_path / "solutions" / "00-fixture"
    shutil.copytree(FIXTURE, src)
    nb_path = src / "fixture.ipynb"
    nb = notebooks.read(nb_path)
    (cell,) = [c for c in nb.cells if c.get("id") == "demo-md"]
    cell["source"] = PROSE
    notebooks.write(nb, nb_path)
    (chapter,) = all_chapters(tmp_path)
    release([chapter])
    return chapter


def _colab_text(chapter: Chapter) -> str:
    cells = notebooks.read(chapter.colab).cells
    return "".join(notebooks.source(c) for c in cells if c.cell_type == "markdown")


def _commit(chapter: Chapter, values: dict[str, str], varies: dict[str, str] | None = None) -> None:
    chapter.measured.parent.mkdir(parents=True, exist_ok=True)
    chapter.measured.write_text(measured.Measured(values, varies or {}).text())


VALUES = {"fx_loss": "0.2512", "fx_steps": "1200", "fx_share": "0.0871"}


def test_release_writes_the_committed_numbers_and_check_guards_them(chapter: Chapter) -> None:
    # nothing committed yet: the names stay, release warns, check fails naming them
    assert "`fx_loss`" in _colab_text(chapter)
    warned: list[str] = []
    release([chapter], warn=warned.append)
    assert len(warned) == 1 and "fx_loss, fx_steps, fx_share" in warned[0]
    assert "python -m publish measure 00-fixture" in warned[0]
    assert any("without a measured value" in line for line in drifted([chapter]))

    # committed, the copy not regenerated: drift; regenerated: the numbers, in sync
    _commit(chapter, VALUES)
    assert drifted([chapter]) == [f"00-fixture: {chapter.colab} differs from the Colab copy of "
                                  "its release and _data/measured/fixture.json"]
    warned.clear()
    release([chapter], warn=warned.append)
    assert warned == [] and drifted([chapter]) == []
    text = _colab_text(chapter)
    assert "its loss falls to 0.25 in 1,200 steps, 9% of the first loss." in text
    assert "fx_" not in text and "measured when the website was built" in text

    # a committed value changes and the copy is not regenerated: check says so
    _commit(chapter, {**VALUES, "fx_loss": "0.2712"})
    assert len(drifted([chapter])) == 1


def _executed_book(chapter: Chapter, build: Path, glued: dict[str, str]) -> Path:
    """A fake ``make book`` output: the release as executed, with the values it glued."""
    out = build / "jupyter_execute" / "chapters" / "00-fixture"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chapter.release, out / "fixture.ipynb")
    saved = {name: {"data": {"text/plain": value}, "metadata": {}} for name, value in glued.items()}
    (out / "fixture.glue.json").write_text(json.dumps(saved))
    return out / "fixture.ipynb"


def test_measure_records_the_cited_values_of_the_executed_book(chapter: Chapter,
                                                               tmp_path: Path) -> None:
    build = tmp_path / "_build"
    _executed_book(chapter, build, {**VALUES, "fx_claims_only": "3"})
    _commit(chapter, {"fx_loss": "0.3", "fx_gone": "1"},
            varies={"fx_loss": "a wall-clock time", "fx_gone": "was cited once"})
    path = measured.record(chapter, build)
    assert path == tmp_path / "_data" / "measured" / "fixture.json"
    committed = measured.load(chapter)
    assert committed.values == VALUES  # cited names only, the executed book's text
    assert committed.varies == {"fx_loss": "a wall-clock time"}  # kept while cited
    assert path.read_text() == committed.text()
    assert measured.missing(chapter) == []
    before = path.stat().st_mtime_ns
    assert measured.record(chapter, build) == path and path.stat().st_mtime_ns == before


def test_measure_refuses_a_stale_or_incomplete_book(chapter: Chapter, tmp_path: Path) -> None:
    build = tmp_path / "_build"
    with pytest.raises(measured.MeasuredError, match="run `make book`"):
        measured.record(chapter, build)
    executed = _executed_book(chapter, build, {"fx_loss": "0.25", "fx_share": "0.1"})
    with pytest.raises(measured.MeasuredError, match="did not glue: fx_steps"):
        measured.record(chapter, build)
    _executed_book(chapter, build, {**VALUES, "fx_share": "'most'"})
    with pytest.raises(measured.MeasuredError, match="fx_share = 'most' cannot be formatted"):
        measured.record(chapter, build)
    _executed_book(chapter, build, VALUES)
    nb = notebooks.read(executed)
    code = next(c for c in nb.cells if c.cell_type == "code" and c.get("id") == "demo")
    code["source"] = "print('another demo')"
    notebooks.write(nb, executed)
    with pytest.raises(measured.MeasuredError, match="ran other code"):
        measured.record(chapter, build)
    assert not chapter.measured.exists()


def test_measure_command(chapter: Chapter, tmp_path: Path, capsys) -> None:
    roots = ["--source-root", str(tmp_path / "solutions"), "--release-root",
             str(tmp_path / "chapters"), "--build", str(tmp_path / "_build")]
    assert main(["measure", "00", *roots]) == 2
    assert "run `make book`" in capsys.readouterr().err
    _executed_book(chapter, tmp_path / "_build", VALUES)
    assert main(["measure", "00", *roots]) == 0
    assert "make release" in capsys.readouterr().out
    assert measured.load(chapter).values == VALUES


def test_a_malformed_measured_file_is_an_error_naming_it(chapter: Chapter) -> None:
    chapter.measured.parent.mkdir(parents=True, exist_ok=True)
    chapter.measured.write_text(json.dumps({"values": {"fx_loss": 0.25}}))
    with pytest.raises(measured.MeasuredError, match="fixture.json: not a measured-values file"):
        measured.load(chapter)


def test_release_and_check_name_a_malformed_measured_file(chapter: Chapter) -> None:
    chapter.measured.parent.mkdir(parents=True, exist_ok=True)
    chapter.measured.write_text("{not json")
    for run in (release, drifted):
        with pytest.raises(ReleaseError, match="00-fixture: .*fixture.json: not a measured-values"):
            run([chapter])
