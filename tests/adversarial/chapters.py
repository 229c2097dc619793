"""Chapters copied under a test's own root and released there, for grading runs.

A grading run reads a snapshot of the chapter's source (a chapter being edited meanwhile
changes nothing in the run) and the release as ``python -m publish release`` writes it (the
committed ``chapters/`` may lag behind while a chapter is edited; the publish tests check it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from coursebook import notebooks
from coursebook.chapters import REPO, Chapter, all_chapters, find_chapter
from publish.release import generate_release

FIXTURES = REPO / "tests" / "fixtures"
#: The small fixture chapter whose exercises live in tests/fixtures/exercises (registered when
#: ``AUTOGRADER_EXTRA_EXERCISES`` names that folder).
FIXTURE = find_chapter("00-fixture", FIXTURES)


def released_copy(chapter: Chapter, root: Path) -> Chapter:
    """``chapter``'s source copied to ``root/solutions/`` and its release written to
    ``root/chapters/``; the same chapter rooted at ``root`` (what ``grade --root`` reads).

    Args:
        chapter: the chapter to copy (the course's, or :data:`FIXTURE`).
        root: an empty folder of the test's own.
    """
    copy = Chapter(chapter.number, chapter.slug, chapter.title, root)
    copy.source.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chapter.source, copy.source)
    notebooks.write(generate_release(copy.source, copy.slug), copy.release)
    return copy


def first_chapter() -> Chapter:
    """Chapter 1 when its source exists, else the fixture chapter."""
    real = [c for c in all_chapters() if c.number == 1]
    return real[0] if real else FIXTURE
