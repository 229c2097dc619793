"""One model of a chapter, with one name for each thing.

A chapter lives in three folders under one **slug**, ``NN-name`` (``02-self-attention``): the
instructor's source ``solutions/<slug>/<stem>.ipynb``, the student release
``chapters/<slug>/<stem>.ipynb`` and the Colab copy ``colab/<slug>/<stem>.ipynb``, where the
**stem** is the slug without its number (``self-attention``). Its exercises are registered in
``course_lib.exercises.<exercises>`` with ids ``<exercises>.<function>``, where **exercises** is the
stem as a Python name (``self_attention``). The slug is also the website's page folder and
nbgrader's assignment id.

Example:
    >>> ch = Chapter(2, "02-self-attention", "2. Self-attention")
    >>> ch.stem, ch.exercises, ch.exercise_module
    ('self-attention', 'self_attention', 'course_lib.exercises.self_attention')
    >>> ch.source.relative_to(REPO).as_posix()
    'solutions/02-self-attention/self-attention.ipynb'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLUG_RE = re.compile(r"^(\d\d)-([a-z0-9][a-z0-9-]*)$")


class UnknownChapter(LookupError):
    """A chapter was named that has no source notebook."""


@dataclass(frozen=True)
class Chapter:
    """A chapter of the course.

    Attributes:
        number: its place in the course, ``2``.
        slug: ``"02-self-attention"``: folder of each copy, website page folder, nbgrader
            assignment.
        title: the source notebook's first heading without ``#``, ``"2. Self-attention"``.
        root: the folder holding ``solutions/``, ``chapters/`` and ``colab/`` (the repository,
            or a test's own copy of that layout).
        solutions: the folder holding the source's ``<slug>/`` when it is not ``root/solutions``
            (a chapter whose copies are generated elsewhere, see :meth:`generated_under`).
    """

    number: int
    slug: str
    title: str
    root: Path = REPO
    solutions: Path | None = None

    def __post_init__(self) -> None:
        match = SLUG_RE.match(self.slug)
        if match is None or int(match.group(1)) != self.number:
            raise ValueError(f"chapter slug {self.slug!r} is not 'NN-name' with "
                             f"NN = {self.number:02d}")

    @property
    def stem(self) -> str:
        """The notebooks' file name without ``.ipynb``: ``"self-attention"``."""
        return self.slug.split("-", 1)[1]

    @property
    def exercises(self) -> str:
        """The exercise module's name and the prefix of exercise ids: ``"self_attention"``."""
        return self.stem.replace("-", "_")

    @property
    def exercise_module(self) -> str:
        """The dotted name of the module registering the chapter's exercises."""
        return f"course_lib.exercises.{self.exercises}"

    def _notebook(self, folder: str) -> Path:
        return self.root / folder / self.slug / f"{self.stem}.ipynb"

    @property
    def source(self) -> Path:
        """The instructor's notebook: solutions and hidden tests."""
        if self.solutions is not None:
            return self.solutions / self.slug / f"{self.stem}.ipynb"
        return self._notebook("solutions")

    @property
    def release(self) -> Path:
        """The student release, generated from :attr:`source`."""
        return self._notebook("chapters")

    @property
    def colab(self) -> Path:
        """The Colab copy (plain Jupyter markdown), generated from :attr:`release`."""
        return self._notebook("colab")

    @property
    def measured(self) -> Path:
        """``_data/measured/<stem>.json``: the numbers the website's build measured, which the
        Colab copy's prose shows (keyed by stem, so renumbering a chapter does not orphan it)."""
        return self.root / "_data" / "measured" / f"{self.stem}.json"

    def generated_under(self, root: Path) -> Chapter:
        """The same chapter, its source read where it is, its generated copies under ``root``.

        Example:
            >>> ch = Chapter(2, "02-self-attention", "2. Self-attention")
            >>> moved = ch.generated_under(Path("/tmp/x"))
            >>> moved.release.as_posix(), moved.source == ch.source
            ('/tmp/x/chapters/02-self-attention/self-attention.ipynb', True)
        """
        return replace(self, root=Path(root), solutions=self.source.parent.parent)


def _title(source: Path) -> str:
    """The first ``# `` heading of a notebook's first markdown cell (the slug when there is
    none)."""
    cells = json.loads(source.read_text(encoding="utf-8")).get("cells", [])
    for cell in cells[:1]:
        text = cell.get("source", "")
        text = "".join(text) if isinstance(text, list) else text
        for line in text.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return source.parent.name


@cache
def all_chapters(root: Path = REPO) -> tuple[Chapter, ...]:
    """Every chapter with a source notebook under ``root/solutions``, in course order.

    Raises:
        ValueError: two folders share a chapter number.
    """
    found: list[Chapter] = []
    folder = root / "solutions"
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = SLUG_RE.match(path.name)
        if match is None:
            continue
        source = path / f"{match.group(2)}.ipynb"
        if source.exists():
            found.append(Chapter(int(match.group(1)), path.name, _title(source), root))
    numbers = [c.number for c in found]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"two chapters share a number under {folder}: {[c.slug for c in found]}")
    return tuple(found)


def find_chapter(name: str, root: Path = REPO) -> Chapter:
    """The chapter named by its slug, number, stem or exercise-module name.

    ``"02-self-attention"``, ``"02"``, ``"2"``, ``"self-attention"``, ``"self_attention"`` and a
    path ending in the slug (``"chapters/02-self-attention/"``) all name chapter 2.

    Raises:
        UnknownChapter: no chapter (or more than one) answers to ``name``; the message lists them.

    Example:
        >>> find_chapter("2").slug
        '02-self-attention'
    """
    key = name.rstrip("/").split("/")[-1]
    chapters = all_chapters(root)
    hits = [c for c in chapters
            if key in (c.slug, c.stem, c.exercises, f"{c.number:02d}", str(c.number))]
    if len(hits) != 1:
        known = ", ".join(c.slug for c in chapters) or "none"
        raise UnknownChapter(f"no chapter {name!r} with a source notebook under "
                             f"{root / 'solutions'} (chapters there: {known})")
    return hits[0]
