"""The website: the book builds with warnings as errors, pages carry their Colab launch button,
and the executed chapters reach the accuracy the text claims (every page in a real browser:
tests/test_site.py).

The build runs every chapter in full mode (as published), once; jupyter-cache keeps the results in
_build/.jupyter_cache, so `make book` after `make test` re-executes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import BUILD, ROOT, chapter_slugs, glued, release_notebook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def _page(slug: str) -> Path:
    return Path("chapters") / slug / release_notebook(slug).with_suffix(".html").name


@pytest.mark.parametrize("slug", chapter_slugs())
def test_chapter_page_has_its_colab_launch_button(built_book: Path, slug: str) -> None:
    """Colab opens, and the download button serves, the plain-Jupyter copy
    colab/NN-slug/slug.ipynb."""
    html = (built_book / _page(slug)).read_text()
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    colab_copy = Path("colab") / slug / release_notebook(slug).name
    assert (ROOT / colab_copy).is_file(), f"{colab_copy} is missing: python -m publish release"
    target = (f"https://colab.research.google.com/github/{repo}/blob/"
              f"{CONFIG['repository']['branch']}/{colab_copy.as_posix()}")
    assert target in html
    assert f"/blob/{CONFIG['repository']['branch']}/chapters/" not in html, \
        "no launch button opens the MyST release"
    served = built_book / "_sources" / "chapters" / slug / release_notebook(slug).name
    assert f'href="../../_sources/chapters/{slug}/{served.name}"' in html
    assert served.read_bytes() == (ROOT / colab_copy).read_bytes(), \
        "the download button serves the Colab copy"


@pytest.mark.parametrize("slug", chapter_slugs())
def test_chapter_page_shows_plots_and_no_solutions(built_book: Path, slug: str) -> None:
    html = (built_book / _page(slug)).read_text()
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', html)
    assert len(images) >= 3, "each chapter shows its experiments' plots"
    for src in images:
        assert (built_book / _page(slug).parent / src).resolve().is_file(), src
    assert "BEGIN SOLUTION" not in html and "grading.check" not in html
    assert "Traceback (most recent call last)" not in html, \
        "exercise test cells hide their failures on the site"


def test_chapter_1_reaches_its_accuracy_claims(built_book: Path) -> None:
    glued_all = glued("01-seq2seq")
    with_attention = float(glued_all["ch1_acc_attention"])
    without = float(glued_all["ch1_acc_no_attention"])
    assert with_attention >= 0.95, f"attention model: {with_attention:.3f} exact match"
    assert with_attention > without


def test_run_times_are_recorded_for_every_chapter(built_book: Path) -> None:
    from jupyter_cache import get_cache

    records = get_cache(str(BUILD / ".jupyter_cache")).list_cache_records()
    timed = {Path(r.uri).name: r.data.get("execution_seconds") for r in records}
    for slug in chapter_slugs():
        assert timed.get(release_notebook(slug).name), f"{slug} has no recorded execution time"
