"""The former chapter model (its ``name`` the slug, its ``slug`` the stem).

The autograder uses :mod:`coursebook.chapters`; this module is left only for the test modules
that still import it (tests/questions.py, tests/test_questions.py, tests/test_grading_chapters.py),
and goes when they move to :mod:`coursebook.chapters`. Test-only exercise modules:
:mod:`autograder.extra_exercises`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE_ROOT = REPO / "solutions"
RELEASE_ROOT = REPO / "chapters"


_CHAPTER_RE = re.compile(r"^(\d\d)-([a-z0-9][a-z0-9-]*)$")


@dataclass(frozen=True)
class Chapter:
    """A chapter ``NN-slug``: its source and release notebooks.

    Attributes:
        name: the folder name, ``"01-seq2seq"`` (nbgrader's assignment id).
        slug: ``"seq2seq"`` (the notebook's name without ``.ipynb``).
        source_root, release_root: the folders holding ``NN-slug/`` of each side.
    """

    name: str
    source_root: Path = SOURCE_ROOT
    release_root: Path = RELEASE_ROOT

    @property
    def slug(self) -> str:
        return self.name.split("-", 1)[1]

    @property
    def exercise_chapter(self) -> str:
        """The prefix of exercise ids: ``02-self-attention`` -> ``self_attention``."""
        return self.slug.replace("-", "_")

    @property
    def source(self) -> Path:
        return self.source_root / self.name / f"{self.slug}.ipynb"

    @property
    def release(self) -> Path:
        return self.release_root / self.name / f"{self.slug}.ipynb"


def find_chapters(source_root: Path = SOURCE_ROOT, release_root: Path = RELEASE_ROOT,
                  names: list[str] | None = None) -> list[Chapter]:
    """The chapters named (``01-seq2seq``, ``01``, or ``seq2seq``), or every chapter with a source.

    Raises:
        SystemExit: naming a chapter that has no source notebook.
    """
    available = sorted(
        p.name for p in source_root.iterdir()
        if p.is_dir() and _CHAPTER_RE.match(p.name) and (p / f"{p.name.split('-', 1)[1]}.ipynb").exists()
    ) if source_root.is_dir() else []
    if not names:
        return [Chapter(n, source_root, release_root) for n in available]
    chosen = []
    for name in names:
        name = name.rstrip("/").split("/")[-1]
        hits = [a for a in available if name in (a, a.split("-", 1)[0], a.split("-", 1)[1])]
        if len(hits) != 1:
            known = ", ".join(available) or "none"
            raise SystemExit(f"no chapter {name!r} with a source notebook under {source_root} "
                             f"(chapters there: {known})")
        chosen.append(Chapter(hits[0], source_root, release_root))
    return chosen
