"""The repository's address, defined once, and the hand-edited files that repeat it.

``repository.url`` of ``_config.yml`` is the address; the setup cell of every source notebook
(``pip install "course-lib @ git+<url>"``) and ``README.md`` repeat it, and the releases and Colab
copies inherit it from the sources. Publishing never rewrites a hand-edited file: when one names
another address, :func:`check_urls` fails with the file and line of each place to edit.

Example:
    >>> import json
    >>> text = 'pip install "course-lib @ git+https://github.com/old/name"'
    >>> [m.group(0) for m in GIT_URL_RE.finditer(text)]
    ['git+https://github.com/old/name']
    >>> [m.group(0) for m in GIT_URL_RE.finditer(json.dumps(text))]  # as a notebook file holds it
    ['git+https://github.com/old/name']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import yaml

from publish.errors import ReleaseError

#: A ``git+`` install URL of a GitHub repository, as setup cells and the README write it.
#: It ends before a quote, space, bracket, ``@``, backtick or backslash (a notebook file's JSON
#: escapes the quote that closes it in a setup cell: ``\"``), or before ``.git``.
GIT_URL_RE = re.compile(r"git\+https://github\.com/[\w.\-]+/[\w.\-]+?(?=[\"'\s)@`\\]|\.git|$)")


class StaleUrl(NamedTuple):
    """One place where a hand-edited file names another repository."""

    path: Path
    line: int  # 1-based line of the file as a text editor shows it
    found: str  # the URL written there, ``git+https://github.com/...``


def repository_url(config: Path) -> str:
    """The course repository's address, ``repository.url`` of ``config`` (``_config.yml``).

    Raises:
        ReleaseError: the file has no ``https://github.com/`` address there.
    """
    settings = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    url = settings.get("repository", {}).get("url")
    if not isinstance(url, str) or not url.startswith("https://github.com/"):
        raise ReleaseError(f"{config}: repository.url must be a https://github.com/ address, "
                           f"got {url!r}")
    return url.rstrip("/")


def stale_urls(files: Iterable[Path], url: str) -> list[StaleUrl]:
    """Every ``git+`` install URL in ``files`` that is not ``git+<url>``, by file and line.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "README.md"
        >>> _ = path.write_text("ok git+https://github.com/a/b\\nold git+https://github.com/x/y\\n")
        >>> [(s.line, s.found) for s in stale_urls([path], "https://github.com/a/b")]
        [(2, 'git+https://github.com/x/y')]
    """
    stale = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            stale += [StaleUrl(path, number, m.group(0)) for m in GIT_URL_RE.finditer(line)
                      if m.group(0) != f"git+{url}"]
    return stale


def check_urls(files: Iterable[Path], config: Path) -> None:
    """Fail unless every install URL of the hand-edited ``files`` is ``config``'s repository.

    Raises:
        ReleaseError: naming each file and line to edit, and the URL to write there.
    """
    url = repository_url(config)
    stale = stale_urls(files, url)
    if stale:
        places = "\n".join(f"  {s.path}:{s.line}: {s.found}" for s in stale)
        raise ReleaseError(f"these hand-edited files name another repository than {config} "
                           f"(repository.url); edit each line to git+{url}, then release again "
                           f"(release never rewrites them):\n{places}")
