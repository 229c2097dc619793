"""The website: the book builds with warnings as errors, pages carry their Colab launch button,
the executed chapters reach the accuracy the text claims, and a real browser renders the math.

The build runs every chapter in full mode (as published), once; jupyter-cache keeps the results in
_build/.jupyter_cache, so `make book` after `make test` re-executes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
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
    """Colab opens, and the download button serves, the plain-Jupyter copy colab/NN-slug/slug.ipynb."""
    html = (built_book / _page(slug)).read_text()
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    colab_copy = Path("colab") / slug / release_notebook(slug).name
    assert (ROOT / colab_copy).is_file(), f"{colab_copy} is missing: python -m autograder release"
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


def test_browser_renders_math_and_the_launch_menu(built_book: Path, tmp_path: Path) -> None:
    assert shutil.which("chromium"), "chromium is missing: `make sysdeps` installs it"
    page = built_book / _page("01-seq2seq")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert "mjx-container" in dom, "MathJax typeset the equations"
    assert "colab.research.google.com" in dom
    shot = BUILD / "screenshots" / "01-seq2seq.png"
    shot.parent.mkdir(exist_ok=True)
    subprocess.run(["chromium", *flags, "--window-size=1280,2400", f"--screenshot={shot}",
                    page.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
