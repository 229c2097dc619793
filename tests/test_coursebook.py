"""The chapter model and the notebook reader/writer every layer uses (coursebook/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coursebook import Chapter, UnknownChapter, all_chapters, find_chapter, notebooks


def _layout(root: Path, slugs: list[str]) -> None:
    for slug in slugs:
        folder = root / "solutions" / slug
        folder.mkdir(parents=True)
        nb = notebooks.new_notebook([f"# {slug} title", "x = 1"])
        notebooks.write(nb, folder / f"{slug.split('-', 1)[1]}.ipynb")


def test_every_chapter_has_its_three_copies_and_an_exercise_module() -> None:
    chapters = all_chapters()
    assert [c.number for c in chapters] == list(range(1, len(chapters) + 1))
    for ch in chapters:
        assert ch.release.exists() and ch.colab.exists(), ch.slug
        assert ch.title.startswith(f"{ch.number}. "), ch.title
        __import__(ch.exercise_module)


@pytest.mark.parametrize("name", ["02-self-attention", "02", "2", "self-attention",
                                  "self_attention", "chapters/02-self-attention/"])
def test_a_chapter_answers_to_each_of_its_names(name: str) -> None:
    assert find_chapter(name).slug == "02-self-attention"


def test_an_unknown_or_ambiguous_name_lists_the_chapters(tmp_path: Path) -> None:
    _layout(tmp_path, ["01-alpha", "02-beta"])
    with pytest.raises(UnknownChapter, match="chapters there: 01-alpha, 02-beta"):
        find_chapter("gamma", tmp_path)
    assert find_chapter("beta", tmp_path).title == "02-beta title"
    release = tmp_path / "chapters" / "02-beta" / "beta.ipynb"
    assert find_chapter("beta", tmp_path).release == release


def test_two_chapters_with_one_number_are_refused(tmp_path: Path) -> None:
    _layout(tmp_path, ["01-alpha", "01-beta"])
    with pytest.raises(ValueError, match="share a number"):
        all_chapters(tmp_path)


def test_a_slug_must_carry_the_chapter_number() -> None:
    with pytest.raises(ValueError, match="NN-name"):
        Chapter(3, "02-beta", "x")


def test_written_notebooks_have_one_source_line_per_line_and_stable_bytes(tmp_path: Path) -> None:
    nb = notebooks.new_notebook(["# T", "a = 1\nb = 2\n", "print('é')"])
    path = tmp_path / "n.ipynb"
    assert notebooks.write(nb, path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["cells"][1]["source"] == ["a = 1\n", "b = 2\n"]
    assert "é" in path.read_text(encoding="utf-8")
    before = path.stat().st_mtime_ns
    assert not notebooks.write(notebooks.read(path), path), "unchanged bytes are not rewritten"
    assert path.stat().st_mtime_ns == before


@pytest.mark.parametrize("text, says", [("{not json", "not a readable Jupyter notebook"),
                                        ('{"nbformat": 4, "nbformat_minor": 5}', "readable")])
def test_a_malformed_notebook_is_named(text: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_text(text)
    with pytest.raises(notebooks.MalformedNotebook, match=says) as err:
        notebooks.read(path)
    assert "bad.ipynb" in str(err.value)


def test_a_chapter_generated_elsewhere_keeps_its_source(tmp_path: Path) -> None:
    _layout(tmp_path / "course", ["01-alpha"])
    (chapter,) = all_chapters(tmp_path / "course")
    moved = chapter.generated_under(tmp_path / "out")
    assert moved.source == chapter.source and moved.source.exists()
    assert moved.release == tmp_path / "out" / "chapters" / "01-alpha" / "alpha.ipynb"
    assert moved.colab == tmp_path / "out" / "colab" / "01-alpha" / "alpha.ipynb"
    assert moved.measured == tmp_path / "out" / "_data" / "measured" / "alpha.json"
    assert chapter.measured == tmp_path / "course" / "_data" / "measured" / "alpha.json"
