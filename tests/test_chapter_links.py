"""Links in chapters 4, 5, 6 and 8 work outside the website (issue 30, item 5).

The Colab copy and a downloaded notebook have no site around them: a link is absolute, and one
into the course's repository (``repository.url`` and ``branch`` of ``_config.yml``) names a file
that exists, and a heading of it when it has an anchor.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

from coursebook.chapters import find_chapter

ROOT = Path(__file__).resolve().parents[1]
SLUGS = ["04-language-models", "05-scaling-laws", "06-efficient-attention", "08-fine-tuning"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("slug", SLUGS)
def test_links_are_absolute_and_those_into_the_repository_resolve(slug: str) -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    prefix = f"{config['url'].rstrip('/')}/blob/{config.get('branch', 'main')}/"
    nb = nbformat.read(find_chapter(slug).source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for url in LINK.findall(cell.source):
            assert url.startswith(("https://", "http://")), f"{slug}: a relative link {url!r}"
            if not url.startswith(prefix):
                continue
            path, _, anchor = url[len(prefix):].partition("#")
            target = ROOT / path
            assert target.is_file(), f"{slug}: {url} names no file of the repository"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", target.read_text(encoding="utf-8"), re.M)
                assert anchor in {_anchor(h) for h in headings}, \
                    f"{slug}: {url}: {path} has no heading with the anchor #{anchor}"
