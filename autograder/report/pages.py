"""HTML pages from Jinja2 templates (``autograder/report/templates/``), every value escaped.

Student ids, file names, failure messages and cell outputs carry students' text: autoescape is
on for every template, so ``<script>`` or a quote in any of them is shown, never run.

Example:
    >>> render("base.html").startswith("<!doctype html>")
    True
    >>> "&lt;script&gt;" in PAGES.from_string("{{ x }}").render(x="<script>")
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined


def _g(value: float) -> str:
    """A number as ``format(value, "g")``: ``3.0`` -> ``3``, ``2.5`` -> ``2.5``."""
    return f"{value:g}"


PAGES = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")),
                    autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                    lstrip_blocks=True, keep_trailing_newline=True)
PAGES.filters["g"] = _g


def render(template: str, **context: Any) -> str:
    """The page ``template`` rendered with ``context`` (escaped; an unknown name is an error)."""
    return PAGES.get_template(template).render(**context)
