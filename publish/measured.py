"""The numbers the website's build measured, written into the Colab copies' prose.

A chapter's text cites measured numbers with ``{glue:text}`name:fmt```; the website fills in the
value that its build of the chapter glued (:func:`course_lib.book.glue`). The Colab copy
(:mod:`publish.colab`) cannot glue, so it writes the same number, formatted as the website
formats it, from one committed file per chapter, ``_data/measured/<stem>.json``
(:attr:`coursebook.Chapter.measured`)::

    {
     "values": {"ch4_bpe_bpb": "3.1654...", ...},
     "varies": {"ch4_cache_speedup": "a ratio of wall-clock times", ...}
    }

``values`` holds, for every name that the chapter's prose cites, the glued value as the executed
book stores it (its ``text/plain``). ``python -m publish measure`` writes them from the executed
book (``_build/jupyter_execute``, which ``make book`` fills) and keeps ``varies`` as it is.
``varies`` is edited by hand: the names whose value changes from one run of the chapter to the
next on the same machine (wall-clock times and what is computed from them), each with why. The
book-build test compares every other committed value with the website's number exactly and only
checks that a varying one is there.

The file is keyed by the chapter's stem (``fine-tuning``), not its number, so that renumbering a
chapter does not orphan it.
"""

from __future__ import annotations

import json
import re
from ast import literal_eval
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from coursebook import REPO, Chapter, notebooks

#: A ``{glue:text}`` role of a chapter's markdown.
GLUE_ROLE_RE = re.compile(r"\{glue:text\}`([^`]*)`")
#: Where ``make book`` writes the executed book.
BUILD = REPO / "_build"


class MeasuredError(RuntimeError):
    """The executed book cannot give the values asked for (missing, stale, or unreadable)."""


@dataclass(frozen=True)
class Measured:
    """One chapter's committed values: ``values`` (name -> text/plain) and ``varies`` (name ->
    why its value changes from run to run)."""

    values: Mapping[str, str] = field(default_factory=dict)
    varies: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """The file's canonical text (sorted keys, one value a line, final newline)."""
        data = {"values": dict(sorted(self.values.items())),
                "varies": dict(sorted(self.varies.items()))}
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def split_role(content: str) -> tuple[str, str]:
    """``"name:.1%"`` -> ``("name", ".1%")``, as myst-nb's ``{glue:text}`` reads its content
    (the last colon separates the format; without one the format is ``s``).

    Example:
        >>> split_role("ch4_bpe_bpb:.2f"), split_role("ch1_beam_n")
        (('ch4_bpe_bpb', '.2f'), ('ch1_beam_n', 's'))
    """
    name, sep, spec = content.strip().rpartition(":")
    return (name, spec) if sep else (spec, "s")


def roles(markdown: str) -> list[tuple[str, str]]:
    """The ``(name, format)`` of every ``{glue:text}`` role in ``markdown``, in order.

    Example:
        >>> roles("BPE {glue:text}`ch4_bpe_bpb:.2f`, char {glue:text}`ch4_char_bpb:.2f`")
        [('ch4_bpe_bpb', '.2f'), ('ch4_char_bpb', '.2f')]
    """
    return [split_role(m.group(1)) for m in GLUE_ROLE_RE.finditer(markdown)]


def format_value(text: str, spec: str) -> str:
    """A glued value's ``text/plain`` formatted with ``spec``, as the website shows it.

    The same rule as myst-nb's ``{glue:text}`` (``myst_nb.core.variables.format_plain_text``):
    the text is read as a Python literal where it is one, then formatted with ``spec``, a
    float format (``e f g n %``) converting to float and an integer one (``b c d o x``) to int.

    Example:
        >>> format_value("0.12345", ".1%"), format_value("1234567", ","), format_value("'a'", "s")
        ('12.3%', '1,234,567', 'a')
    """
    try:
        value: Any = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if spec == "":
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


def load(chapter: Chapter) -> Measured:
    """The chapter's committed values (none when it has no file yet).

    Raises:
        MeasuredError: the file is not the format :meth:`Measured.text` writes.
    """
    path = chapter.measured
    if not path.exists():
        return Measured()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        values, varies = data["values"], data.get("varies", {})
        if not all(isinstance(v, str) for v in [*values.values(), *varies.values()]):
            raise ValueError("values and reasons must be strings")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise MeasuredError(f"{path}: not a measured-values file ({err})") from err
    return Measured(dict(values), dict(varies))


def chapter_roles(chapter: Chapter) -> list[tuple[str, str]]:
    """Every ``{glue:text}`` role of the chapter's release markdown, in page order."""
    nb = notebooks.read(chapter.release)
    return [r for cell in nb.cells if cell.cell_type == "markdown"
            for r in roles(notebooks.source(cell))]


def missing(chapter: Chapter, names: Iterable[str] | None = None) -> list[str]:
    """The glue names of the chapter's prose (or ``names``) without a committed value, in order."""
    values = load(chapter).values
    wanted = [n for n, _ in chapter_roles(chapter)] if names is None else list(names)
    return list(dict.fromkeys(n for n in wanted if n not in values))


def executed(chapter: Chapter, build: Path = BUILD) -> dict[str, str]:
    """What the executed book glued for the chapter: ``{name: text/plain}``.

    Raises:
        MeasuredError: the book has not executed the chapter, or executed another version of its
            code (the release's code cells changed since ``make book``).
    """
    notebook = build / "jupyter_execute" / "chapters" / chapter.slug / chapter.release.name
    glue_file = notebook.with_suffix(".glue.json")
    if not notebook.exists() or not glue_file.exists():
        raise MeasuredError(f"{chapter.slug}: the executed book has no {glue_file}: "
                            "run `make book`")
    if _code(notebooks.read(notebook)) != _code(notebooks.read(chapter.release)):
        raise MeasuredError(f"{chapter.slug}: the executed book ran other code than "
                            f"{chapter.release}: run `make release` and `make book` first")
    saved = json.loads(glue_file.read_text(encoding="utf-8"))
    return {name: output["data"]["text/plain"] for name, output in saved.items()
            if "text/plain" in output.get("data", {})}


def _code(nb: NotebookNode) -> list[str]:
    """The code cells' sources of ``nb``, stripped (what the executed book must have run)."""
    return [notebooks.source(c).strip() for c in nb.cells if c.cell_type == "code"]


def record(chapter: Chapter, build: Path = BUILD) -> Path:
    """Write ``_data/measured/<stem>.json`` from the executed book: the value of every name that
    the chapter's prose cites (the hand-kept ``varies`` entries of names still cited stay); a
    file whose bytes would not change is left untouched.

    Raises:
        MeasuredError: the book is not executed or is stale (:func:`executed`), a cited name was
            not glued, or a value cannot be formatted as the prose asks.
    """
    glued = executed(chapter, build)
    cited = chapter_roles(chapter)
    absent = list(dict.fromkeys(n for n, _ in cited if n not in glued))
    if absent:
        raise MeasuredError(f"{chapter.slug}: the prose cites values that the executed book did "
                            f"not glue: {', '.join(absent)}")
    for name, spec in cited:
        try:
            format_value(glued[name], spec)
        except (ValueError, TypeError) as err:
            raise MeasuredError(f"{chapter.slug}: {name} = {glued[name]} cannot be formatted "
                                f"as {spec!r}: {err}") from err
    names = {n for n, _ in cited}
    old = load(chapter)
    new = Measured({n: glued[n] for n in names},
                   {n: why for n, why in old.varies.items() if n in names})
    path = chapter.measured
    if not path.exists() or path.read_text(encoding="utf-8") != new.text():  # same bytes: untouched
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new.text(), encoding="utf-8")
    return path
