"""Helpers for notebooks that are also book pages: gluing measured numbers into the text.

``glue(name, value)`` stores a value in the cell's output the way myst-nb's ``glue`` does (without
needing myst-nb, which Colab lacks), so the book's prose can cite it with
``{glue:text}`name:.1%``` and the test suite can read it back from the executed book
(``_build/jupyter_execute/**/<notebook>.glue.json``).

It also prints ``name = value``: the Colab copy of a chapter (``colab/``, plain Jupyter markdown)
cannot fill values into its prose, so its text carries the numbers the website's build measured
(committed in ``_data/measured/``, see ``publish.measured``), and the student reads the numbers
of their own run in the cells, on these lines.
"""

from __future__ import annotations

from typing import Any

GLUE_PREFIX = "application/papermill.record/"


def label(name: str, value: Any) -> str:
    """The line ``glue`` prints: ``name = value``, floats with four significant digits.

    Example:
        >>> label("acc", 0.99234)
        'acc = 0.9923'
        >>> label("n", 3)
        'n = 3'
    """
    if isinstance(value, float):
        return f"{name} = {value:.4g}"
    return f"{name} = {value}"


def glue(name: str, value: Any, display: bool = True) -> None:
    """Record ``value`` under ``name`` in this cell's output (myst-nb's glue format).

    Args:
        name: a name unique within the notebook.
        value: anything IPython can display; numbers are stored as their ``repr``.
        display: also print ``name = value`` (see :func:`label`) in the notebook; the stored value
            itself is always hidden, so the page shows the labelled line once.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    bundle, metadata = format_display_data(value)
    metadata = dict(metadata)
    metadata["scrapbook"] = {"name": name, "mime_prefix": GLUE_PREFIX}
    ipy_display({GLUE_PREFIX + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)
    if display:
        print(label(name, value))
