"""Helpers for notebooks that are also book pages: gluing measured numbers into the text.

``glue(name, value)`` stores a value in the cell's output the way myst-nb's ``glue`` does (without
needing myst-nb, which Colab lacks), so the book's prose can cite it with
``{glue:text}`name:.1%``` and the test suite can read it back from the executed book
(``_build/jupyter_execute/**/<notebook>.glue.json``).
"""

from __future__ import annotations

from typing import Any

GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value: Any, display: bool = True) -> None:
    """Record ``value`` under ``name`` in this cell's output (myst-nb's glue format).

    Args:
        name: a name unique within the notebook.
        value: anything IPython can display; numbers are stored as their ``repr``.
        display: also show the value in the notebook.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata = dict(metadata)
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)
