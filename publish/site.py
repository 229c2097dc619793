"""The repository-wide inputs of publishing: ``_config.yml``, ``bib/`` and ``README.md``.

A :class:`Site` is rooted at the repository, or at a test's copy of its layout, so that a test can
publish into ``tmp_path`` without reading or writing the repository's own files.

Example:
    >>> site = Site()
    >>> site.config.name, site.readme.name, all(p.suffix == ".bib" for p in site.bib_files())
    ('_config.yml', 'README.md', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coursebook import REPO


@dataclass(frozen=True)
class Site:
    """Where the website's configuration, bibliography and README live.

    Attributes:
        root: the folder holding ``_config.yml``, ``bib/`` and ``README.md``.
    """

    root: Path = REPO

    @property
    def config(self) -> Path:
        """``_config.yml``: the website's address, its LaTeX macros, the repository's address."""
        return self.root / "_config.yml"

    @property
    def readme(self) -> Path:
        """``README.md``, hand-edited, which names the repository in its install line."""
        return self.root / "README.md"

    def bib_files(self) -> list[Path]:
        """The course's bibliography files, ``bib/*.bib``, sorted."""
        return sorted((self.root / "bib").glob("*.bib"))


#: The repository's own site, the default of every publishing function.
SITE = Site()
