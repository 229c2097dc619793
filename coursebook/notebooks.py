r"""The one reader and writer of notebook files, and the cell accessors every layer shares.

Generated notebooks (releases, Colab copies) are written by :func:`dumps`: nbformat's JSON with one
source line per line (so a diff shows the lines that changed, not whole cells), keys sorted, a
one-space indent, non-ASCII kept as written and a final newline. The same notebook always gives the
same bytes.

Example:
    >>> nb = new_notebook(["# Title", "x = 1\ny = 2"])
    >>> text = dumps(nb)
    >>> '"x = 1\\n",' in text and text.endswith("}\n")
    True
    >>> dumps(reads(text)) == text
    True
    >>> source(reads(text).cells[1])
    'x = 1\ny = 2'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode


class MalformedNotebook(ValueError):
    """A file that is not a readable Jupyter notebook (the message names the file and why)."""


def reads(text: str, name: str = "<notebook>") -> NotebookNode:
    """Parse notebook JSON text (any nbformat 4 minor version).

    Raises:
        MalformedNotebook: ``text`` is not JSON, or not a notebook nbformat can read.
    """
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as err:  # nbformat raises JSONDecodeError, NotJSONError, KeyError, ...
        raise MalformedNotebook(f"{name} is not a readable Jupyter notebook: "
                                f"{type(err).__name__}: {err}") from err
    if not isinstance(nb.get("cells"), list):
        raise MalformedNotebook(f"{name} is not a readable Jupyter notebook: it has no list of "
                                "cells")
    return nb


def read(path: Path) -> NotebookNode:
    """Read the notebook at ``path`` (see :func:`reads`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise MalformedNotebook(f"{path} cannot be read as UTF-8 text: {err}") from err
    return reads(text, str(path))


def dumps(nb: NotebookNode) -> str:
    """The normalised text of a notebook: one source line per JSON string, sorted keys, final
    newline."""
    return nbformat.writes(nb, version=4).rstrip("\n") + "\n"


def write(nb: NotebookNode, path: Path) -> bool:
    """Write ``nb`` to ``path`` normalised; leave the file untouched when its bytes would not
    change.

    Returns:
        True when the file was written.
    """
    path = Path(path)
    text = dumps(nb)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def source(cell: dict[str, Any]) -> str:
    """A cell's source as one string, whether stored as a string or as a list of lines."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def tags(cell: dict[str, Any]) -> list[str]:
    """A cell's tags (``metadata.tags``), empty when it has none."""
    return list(cell.get("metadata", {}).get("tags", []))


def nbgrader(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's nbgrader metadata (empty when it has none)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def new_notebook(cells: list[str]) -> NotebookNode:
    """A small notebook for examples and tests: markdown for texts starting with ``#``, else code.

    Cell ids are ``cell-000``, ``cell-001``, ... so the same texts give the same notebook.
    """
    made = [nbformat.v4.new_markdown_cell(text) if text.startswith("#")
            else nbformat.v4.new_code_cell(text) for text in cells]
    for i, cell in enumerate(made):
        cell["id"] = f"cell-{i:03d}"
    return nbformat.v4.new_notebook(cells=made)
