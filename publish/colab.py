"""The Colab copy of a student release: the same notebook in plain Jupyter markdown.

The website renders ``chapters/NN-slug/slug.ipynb`` with MyST (citations, numbered equations,
glued numbers, the reading list). Colab, JupyterLab and VS Code render markdown without MyST, so a
student who opens that file sees role text instead of the reference, the equation or the number.
``python -m publish release`` therefore also writes ``colab/NN-slug/slug.ipynb``, the notebook
that the website's Colab and download buttons open, converted here:

=============================  ====================================================================
MyST in ``chapters/``          plain Jupyter in ``colab/``
=============================  ====================================================================
``$$ ... $$ (eq-label)``       ``$$ ... \\tag{n} $$``, numbered in page order as the website does
``{eq}`eq-label```             ``(n)``
``{cite}`a,b```                ``([Author et al., 2015](site#further-reading); ...)``
``{cite:t}`a```                ``[Author et al. (2015)](site#further-reading)``
``{glue:text}`name:fmt```      the website's number, formatted with ``fmt`` (``_data/measured``)
```{bibliography}```           the chapter's reading list, written out (the cited entries)
``\\softmax`` (a book macro)    its definition from ``_config.yml`` (``\\operatorname{softmax}``)
=============================  ====================================================================

Glued numbers come from the chapter's committed measurements (:mod:`publish.measured`): the
values the website's build glued, formatted as the website formats them, so the Colab copy reads
as the website does; a note under the title says that the student's own run prints its own figures
in the cells (``name = value``, :func:`course_lib.book.glue`). A name without a committed value is
left as `` `name` `` (:func:`missing_values` lists them; ``release`` warns and ``check``
fails).

Any other MyST role or directive is an error naming the cell, so a new chapter cannot ship one to
Colab unnoticed. Code cells, outputs and metadata (nbgrader's included) are left as they are.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from coursebook import REPO, Chapter, notebooks
from publish.measured import format_value, roles, split_role

#: A MyST role: ``{name}`content```.
ROLE_RE = re.compile(r"\{([A-Za-z][\w:.\-]*)\}`([^`]*)`")
#: A MyST directive fence: ```` ```{name} ```` or ``:::{name}``.
DIRECTIVE_RE = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{([^}]*)\}(.*)$", re.MULTILINE)
#: A labelled display equation: ``$$ ... $$ (label)``.
LABELLED_EQ_RE = re.compile(r"\$\$(.+?)\$\$[ \t]*\(([\w\-:.]+)\)", re.DOTALL)
#: What would still be MyST after conversion (checked on the output).
LEFTOVER_RES = {
    "a role": ROLE_RE,
    "a directive": DIRECTIVE_RE,
    "a target label": re.compile(r"^\([\w\-:.]+\)=[ \t]*$", re.MULTILINE),
    "a substitution": re.compile(r"\{\{[^}]*\}\}"),
    "a labelled equation": re.compile(r"\$\$[ \t]*\([\w\-:.]+\)"),
}
NOTE = ("*This is the Colab copy of the chapter; the [website]({page}) shows the same text. The "
        "figures in the text were measured when the website was built; your run prints its own "
        "in the cells (as `name = value`), and on another machine they can differ.*")


class ColabConversionError(ValueError):
    """The release uses markdown that the converter cannot turn into plain Jupyter."""


@dataclass(frozen=True)
class Reference:
    """One bibliography entry as the Colab copy shows it."""

    key: str
    authors_short: str  # "Bahdanau et al." / "Luong and Manning" / "Vaswani et al."
    year: str
    full: str  # the reading-list line, markdown


@dataclass(frozen=True)
class SiteConfig:
    """What the converter takes from ``_config.yml``: the website and the book's macros."""

    baseurl: str
    macros: Mapping[str, str]

    @classmethod
    def load(cls, config: Path = REPO / "_config.yml") -> SiteConfig:
        """The website's address and macros from ``config`` (``_config.yml``).

        Raises:
            ColabConversionError: ``html.baseurl`` is missing.
        """
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
        baseurl = data.get("html", {}).get("baseurl")
        if not baseurl:
            raise ColabConversionError(f"{config}: html.baseurl (the website's address) is missing")
        macros = (data.get("sphinx", {}).get("config", {}).get("mathjax3_config", {})
                  .get("tex", {}).get("macros", {}))
        return cls(baseurl.rstrip("/") + "/", dict(macros))


# --------------------------------------------------------------------------------------------
# The bibliography
# --------------------------------------------------------------------------------------------


def _last_names(persons: list[Any]) -> list[str]:
    """The last names (with their "von" parts) of pybtex persons, LaTeX turned into text."""
    from pybtex.richtext import Text

    names = []
    for person in persons:
        parts = person.prelast_names + person.last_names
        names.append(str(Text.from_latex(" ".join(parts))).replace("{", "").replace("}", ""))
    return names


def _latex_text(value: str) -> str:
    """A BibTeX field's LaTeX as plain text, braces dropped."""
    from pybtex.richtext import Text

    return str(Text.from_latex(value)).replace("{", "").replace("}", "")


def load_references(bib_files: list[Path]) -> dict[str, Reference]:
    """Every entry of the course's ``.bib`` files, by key.

    Example:
        >>> refs = load_references(sorted((REPO / "bib").glob("*.bib")))
        >>> refs["bahdanau2014neural"].authors_short, refs["bahdanau2014neural"].year
        ('Bahdanau et al.', '2014')
    """
    from pybtex.database import parse_file

    refs: dict[str, Reference] = {}
    for path in bib_files:
        for key, entry in parse_file(str(path), bib_format="bibtex").entries.items():
            last = _last_names(entry.persons.get("author", []))
            if not last:
                raise ColabConversionError(f"{path.name}: entry {key} has no author")
            short = (last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2
                     else f"{last[0]} et al.")
            year = entry.fields.get("year", "n.d.")
            title = _latex_text(entry.fields.get("title", "")).strip()
            venue = _latex_text(entry.fields.get("booktitle") or entry.fields.get("journal")
                                or entry.fields.get("publisher") or "").strip()
            url = entry.fields.get("url", "")
            names = ", ".join(last[:-1]) + (" and " if len(last) > 1 else "") + last[-1]
            line = f"{names} ({year}). {title}."
            if venue:
                line += f" *{venue}*."
            if url:
                line += f" <{url}>"
            refs[key] = Reference(key, short, year, line)
    return refs


# --------------------------------------------------------------------------------------------
# The conversion
# --------------------------------------------------------------------------------------------


def _equation_numbers(cells: list[dict[str, Any]]) -> dict[str, int]:
    """Labelled display equations numbered 1, 2, ... in page order (the website's numbering)."""
    numbers: dict[str, int] = {}
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        for match in LABELLED_EQ_RE.finditer(notebooks.source(cell)):
            label = match.group(2)
            if label in numbers:
                raise ColabConversionError(f"equation label {label!r} is used twice")
            numbers[label] = len(numbers) + 1
    return numbers


def _reading_list_anchor(cells: list[dict[str, Any]]) -> str:
    """The website's anchor of the section that holds the ``{bibliography}`` directive."""
    for cell in cells:
        text = notebooks.source(cell)
        if cell["cell_type"] == "markdown" and re.search(r"\{bibliography\}", text):
            headings = re.findall(r"^#+\s+(.+?)\s*$", text, re.MULTILINE)
            if headings:
                return re.sub(r"[^a-z0-9]+", "-", headings[-1].lower()).strip("-")
    return ""


def _literal(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement function of ``re.sub`` that inserts ``text`` as it is."""
    return lambda _match: text


class _Converter:
    """The conversion of one notebook's markdown: its equation numbers, the citations it has
    made (for the reading list) and the glued names it has met."""

    def __init__(self, cells: list[dict[str, Any]], page_url: str, site: SiteConfig,
                 refs: Mapping[str, Reference], measured: Mapping[str, str]) -> None:
        self.equations = _equation_numbers(cells)
        anchor = _reading_list_anchor(cells)
        self.reading_list = page_url + (f"#{anchor}" if anchor else "")
        self.site = site
        self.refs = refs
        self.measured = measured
        self.cited: list[str] = []
        self.glued: list[str] = []

    def _ref(self, key: str, where: str) -> Reference:
        """The reference of citation ``key``, recorded as cited."""
        if key not in self.refs:
            raise ColabConversionError(f"{where}: citation key {key!r} is in no bib/*.bib file")
        if key not in self.cited:
            self.cited.append(key)
        return self.refs[key]

    def role(self, match: re.Match[str], where: str) -> str:
        """The plain text of one MyST role (``cite``, ``cite:t``, ``eq``, ``glue:text``)."""
        name, content = match.group(1), match.group(2)
        if name in ("cite", "cite:p", "cite:ps"):
            items = [self._ref(k.strip(), where) for k in content.split(",") if k.strip()]
            return "(" + "; ".join(f"[{r.authors_short}, {r.year}]({self.reading_list})"
                                   for r in items) + ")"
        if name in ("cite:t", "cite:ts"):
            items = [self._ref(k.strip(), where) for k in content.split(",") if k.strip()]
            return "; ".join(f"[{r.authors_short} ({r.year})]({self.reading_list})" for r in items)
        if name == "eq":
            label = content.strip()
            if label not in self.equations:
                raise ColabConversionError(f"{where}: {{eq}} refers to unknown equation {label!r}")
            return f"({self.equations[label]})"
        if name == "glue:text":
            glue_name, spec = split_role(content)
            self.glued.append(glue_name)
            if glue_name not in self.measured:
                return f"`{glue_name}`"
            try:
                return format_value(self.measured[glue_name], spec)
            except (ValueError, TypeError) as err:
                raise ColabConversionError(f"{where}: measured {glue_name} = "
                                           f"{self.measured[glue_name]} cannot be formatted as "
                                           f"{spec!r}: {err}") from err
        raise ColabConversionError(f"{where}: MyST role {{{name}}} has no plain-Jupyter form; "
                                   "use a cite, eq or glue:text role, or plain markdown")

    def equation(self, match: re.Match[str]) -> str:
        """A labelled display equation with its number as ``\\tag{n}``."""
        body, label = match.group(1), match.group(2)
        return f"$${body.rstrip()} \\tag{{{self.equations[label]}}}$$"

    def bibliography(self) -> str:
        """The reading list: every cited entry, sorted, and a link to the website's list."""
        lines = [f"- {self.refs[k].full}" for k in sorted(self.cited, key=lambda k: (
            self.refs[k].full.lower()))]
        return ("\n".join(lines)
                + f"\n\nThe same list, with links, is on the [website]({self.reading_list}).")

    def markdown(self, text: str, where: str) -> str:
        """One markdown cell's text converted (equations, roles, the book's macros)."""
        text = LABELLED_EQ_RE.sub(self.equation, text)
        text = ROLE_RE.sub(lambda m: self.role(m, where), text)
        for name, definition in self.site.macros.items():
            # a function, not a replacement string: a definition's backslashes are literal
            text = re.compile(rf"\\{re.escape(name)}(?![A-Za-z])").sub(_literal(definition), text)
        return text


def _bibliography_block(text: str) -> re.Match[str] | None:
    """The ``{bibliography}`` directive of ``text``, fence to fence, if it has one."""
    return re.search(r"^(`{3,}|:{3,})[ \t]*\{bibliography\}[^\n]*\n(?:.*?\n)?\1[ \t]*$", text,
                     re.MULTILINE | re.DOTALL)


def leftovers(text: str) -> list[str]:
    """What in ``text`` would still be MyST (empty when it is plain Jupyter markdown).

    Example:
        >>> leftovers("see {cite}`x` and $a$")
        ['a role: {cite}`x`']
        >>> leftovers("plain $x^2$ text")
        []
    """
    found = []
    for what, pattern in LEFTOVER_RES.items():
        for match in pattern.finditer(text):
            found.append(f"{what}: {match.group(0).strip()}")
    return found


def missing_values(nb: Mapping[str, Any], measured: Mapping[str, str]) -> list[str]:
    """The names that ``nb``'s markdown glues and ``measured`` has no value of, in page order.

    Example:
        >>> missing_values({"cells": [{"cell_type": "markdown",
        ...                 "source": "{glue:text}`a:.1f` and {glue:text}`b`"}]}, {"a": "0.5"})
        ['b']
    """
    names = [n for cell in nb["cells"] if cell["cell_type"] == "markdown"
             for n, _ in roles(notebooks.source(cell))]
    return list(dict.fromkeys(n for n in names if n not in measured))


def to_colab(nb: Mapping[str, Any], *, page_url: str, site: SiteConfig,
             refs: Mapping[str, Reference],
             measured: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plain-Jupyter copy of release ``nb`` (a new notebook; ``nb`` is not changed).

    Args:
        nb: the student release, as JSON (``chapters/NN-slug/slug.ipynb``).
        page_url: the chapter's page on the website (citations link to its reading list).
        site: the website's address and the book's LaTeX macros.
        refs: the course's bibliography (:func:`load_references`).
        measured: the values the website's build glued, ``{name: text/plain}``
            (:func:`publish.measured.load`); a glued name without one stays `` `name` ``.

    Raises:
        ColabConversionError: a role or directive without a plain form, an unknown citation key or
            equation label, or MyST left over after conversion (the message names the cell).
    """
    out = copy.deepcopy(dict(nb))
    cells = out["cells"]
    conv = _Converter(cells, page_url, site, refs, measured or {})
    bib_cell = None
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        where = f"cell {i}"
        text = notebooks.source(cell)
        block = _bibliography_block(text)
        if block:
            bib_cell = (i, block)
        for match in DIRECTIVE_RE.finditer(text):
            if match.group(2).strip() != "bibliography":
                raise ColabConversionError(f"{where}: MyST directive {{{match.group(2)}}} has no "
                                           "plain-Jupyter form; write plain markdown")
        cell["source"] = conv.markdown(text, where)
    if bib_cell is not None:
        i, block = bib_cell
        text = cells[i]["source"]
        start = text.index(block.group(0).split("\n", 1)[0])
        end = start + len(block.group(0))
        cells[i]["source"] = text[:start] + conv.bibliography() + text[end:]
    if conv.glued and cells and cells[0]["cell_type"] == "markdown":
        cells[0]["source"] = (cells[0]["source"].rstrip() + "\n\n"
                              + NOTE.format(page=page_url))
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            bad = leftovers(cell["source"])
            if bad:
                raise ColabConversionError(f"cell {i}: MyST left in the Colab copy: {bad[0]}")
    return out


def page_url(site: SiteConfig, chapter: Chapter) -> str:
    """The chapter's page on the website.

    Example:
        >>> page_url(SiteConfig("https://example.org/c/", {}), Chapter(1, "01-seq2seq", "1. S"))
        'https://example.org/c/chapters/01-seq2seq/seq2seq.html'
    """
    return f"{site.baseurl}chapters/{chapter.slug}/{chapter.stem}.html"
