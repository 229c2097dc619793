"""The roster: who the students are, by every name, alias, e-mail and LMS id they go by.

Names are compared after Unicode normalisation (NFC) and case folding on both sides, so a macOS
zip's decomposed "Zoë" matches the roster's; a name, alias or LMS id several rows share is
listed when the roster is read and never decides alone.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

LMS_WHO = {"Canvas": "user", "Moodle": "participant"}
LMS_COLUMN = {"Canvas": "canvas_id", "Moodle": "moodle_id"}


class RosterError(ValueError):
    """The roster cannot be used as it is (unreadable, no ``student_id`` column, one id twice);
    the message says what to fix."""


CANVAS_ID_COLUMNS = ("canvas_id",)
MOODLE_ID_COLUMNS = ("moodle_id", "participant_id")
_ALIAS_COLUMNS = ("aliases", "alias", "lms_id", "username")
_WORD = re.compile(r"(?:[^\W_]|[@.+-])+")


def normalise(text: str) -> str:
    """``text`` for comparing names: one Unicode normal form (NFC) after Unicode's caseless
    matching, so a macOS zip's decomposed "Zoë" and any case match the roster.

    Example:
        >>> normalise("ZOE\\u0308  Brown") == normalise("zoë brown") == "zoë brown"
        True
    """
    text = unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).casefold())
    return " ".join(text.split())


def name_words(text: str) -> tuple[str, ...]:
    """The words of a name, file or folder name, normalised (:func:`normalise`); ``_`` and
    punctuation other than ``@ . + -`` separate words.

    Example:
        >>> name_words("doejane_LATE_4711_Jane Doe.ipynb")
        ('doejane', 'late', '4711', 'jane', 'doe.ipynb')
    """
    return tuple(_WORD.findall(normalise(text)))


def _name_keys(name: str) -> set[tuple[str, ...]]:
    """The ways a roster name may appear: as written, first-last and last-first (``Doe, Jane``
    or the last word first), each also squashed into one word as Canvas writes it
    (``doejane``)."""
    words = name_words(name)
    if not words:
        return set()
    if "," in name:
        last, first = (name_words(part) for part in name.split(",", 1))
        orders = {first + last, last + first}
    else:
        orders = {words, words[-1:] + words[:-1], tuple(reversed(words))}
    return {words} | orders | {("".join(o),) for o in orders}


def _rows_text(numbers: list[int]) -> str:
    """``"rows 2 and 3"``, ``"rows 2, 3 and 5"``."""
    text = [str(n) for n in numbers]
    return "rows " + (", ".join(text[:-1]) + " and " + text[-1] if len(text) > 1 else text[0])


@dataclass
class Roster:
    """A roster read by :func:`read_roster`.

    Attributes:
        rows: ``student_id -> {column: value}`` (columns lower-case, values stripped), in the
            file's order.
        keys: ``words -> student ids``: every name, id, alias and e-mail of each row as
            :func:`name_words`; a key of several students is ambiguous and never decides alone.
        lms_ids: ``"Canvas"`` / ``"Moodle"`` -> ``LMS id -> student ids`` (from ``canvas_id``;
            ``moodle_id`` or ``participant_id``).
        warnings: what is ambiguous in the roster, in words (printed by ``grade`` and written
            to ``report.csv``).
        name: the roster's file name, for reports.
    """

    rows: dict[str, dict[str, str]]
    keys: dict[tuple[str, ...], tuple[str, ...]]
    lms_ids: dict[str, dict[str, tuple[str, ...]]]
    warnings: list[str]
    name: str = "roster.csv"

    def __post_init__(self) -> None:
        self.longest = max((len(k) for k in self.keys), default=0)

    def lms_id_of(self, lms: str, sid: str) -> str:
        """The LMS id of ``sid``'s row (``""`` when the row has none)."""
        row = self.rows.get(sid, {})
        columns = CANVAS_ID_COLUMNS if lms == "Canvas" else MOODLE_ID_COLUMNS
        return next((row[c] for c in columns if row.get(c)), "")

def _read_rows(path: Path) -> list[tuple[int, dict]]:
    """The roster's rows with their line numbers, once its header has a student id column."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = [(h or "").strip().lower() for h in reader.fieldnames or []]
            raw = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise RosterError(f"the roster {path} could not be read ({err})") from None
    if "student_id" not in header and "id" not in header:
        raise RosterError(f"the roster {path} has no student_id column (its columns: "
                          f"{', '.join(header) or 'none'})")
    return raw


def _rows_by_id(path: Path, raw: list[tuple[int, dict]], warnings: list[str],
                ) -> tuple[dict[str, dict[str, str]], dict[str, list[int]]]:
    """``student_id -> cleaned row`` and ``student_id -> line numbers``; an id twice: an error."""
    rows: dict[str, dict[str, str]] = {}
    where: dict[str, list[int]] = {}
    for line, row in raw:
        clean = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()
                 if isinstance(v, str)}
        sid = clean.get("student_id") or clean.get("id") or ""
        if not sid:
            if any(clean.values()):
                warnings.append(f"row {line} has no student_id: it is not read")
            continue
        where.setdefault(sid, []).append(line)
        rows.setdefault(sid, clean)
    twice = {sid: lines for sid, lines in where.items() if len(lines) > 1}
    if twice:
        raise RosterError("; ".join(f"student_id {sid} is on {_rows_text(lines)}"
                                    for sid, lines in twice.items())
                          + f" of {path}: each student must be on one row")
    return rows, where


def _row_keys(sid: str, row: dict[str, str]) -> set[tuple[str, ...]]:
    """Every key a row goes by: its id, aliases, e-mail (and its local part), name orders."""
    keys = {name_words(sid)}
    for col in _ALIAS_COLUMNS:
        keys |= {name_words(a) for a in row.get(col, "").replace(";", ",").split(",")}
    email = row.get("email", "")
    if email:
        keys |= {name_words(email), name_words(email.split("@", 1)[0])}
    return keys | _name_keys(row.get("name", ""))


def _index(rows: dict[str, dict[str, str]],
           ) -> tuple[dict[tuple[str, ...], list[str]], dict[str, dict[str, list[str]]]]:
    """``key -> student ids`` and ``LMS -> LMS id -> student ids`` of every row."""
    holders: dict[tuple[str, ...], list[str]] = {}
    lms_ids: dict[str, dict[str, list[str]]] = {"Canvas": {}, "Moodle": {}}
    for sid, row in rows.items():
        for key in _row_keys(sid, row):
            if key:
                holders.setdefault(key, []).append(sid)
        for lms, columns in (("Canvas", CANVAS_ID_COLUMNS), ("Moodle", MOODLE_ID_COLUMNS)):
            for value in {row[c] for c in columns if row.get(c)}:
                lms_ids[lms].setdefault(value, []).append(sid)
    return holders, lms_ids


def _shared_warnings(holders: dict[tuple[str, ...], list[str]],
                     lms_ids: dict[str, dict[str, list[str]]],
                     where: dict[str, list[int]]) -> list[str]:
    """A warning for each name, alias or LMS id several rows share."""
    warnings = []
    shared: dict[tuple[str, ...], list[str]] = {}
    for key, sids in holders.items():
        if len(sids) > 1:
            shared.setdefault(tuple(sids), []).append(" ".join(key))
    for owners, names in shared.items():
        lines = sorted(line for sid in owners for line in where[sid])
        warnings.append(f"{', '.join(repr(n) for n in sorted(names))} "
                        f"{'is' if len(names) == 1 else 'are'} shared by {', '.join(owners)} "
                        f"({_rows_text(lines)}): a file named by "
                        f"{'it' if len(names) == 1 else 'these'} alone is reported, not mapped "
                        "(give each row its canvas_id or moodle_id, or an alias of its own)")
    for lms, ids in lms_ids.items():
        column = "canvas_id" if lms == "Canvas" else "moodle_id/participant_id"
        for value, sids in ids.items():
            if len(sids) > 1:
                lines = sorted(line for sid in sids for line in where[sid])
                warnings.append(f"{column} {value} is on {_rows_text(lines)} "
                                f"({', '.join(sids)}): files of {lms} {LMS_WHO[lms]} {value} "
                                "are reported, not mapped")
    return warnings


def read_roster(path: Path) -> Roster:
    """Read a roster CSV: a ``student_id`` (or ``id``) column and optional ``name``, ``email``,
    ``aliases`` (``alias``, ``lms_id``, ``username``; several separated by ``,`` or ``;``),
    ``canvas_id`` (Canvas's user id) and ``moodle_id`` / ``participant_id`` (the number of
    Moodle's download folders). Headers are matched without case or surrounding spaces.

    A name, alias or LMS id held by several rows is listed in :attr:`Roster.warnings` (a file
    named by it alone is reported, not mapped); a row without a student id is skipped with a
    warning.

    Raises:
        RosterError: the file cannot be read, has no ``student_id`` column, or holds one
            student id on several rows (grades are keyed by it).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "roster.csv"
        >>> _ = path.write_text("student_id,name,canvas_id\\n"
        ...                     "s1,Wei Zhang,3001\\ns2,Wei Zhang,3002\\n")
        >>> r = read_roster(path)
        >>> r.lms_ids["Canvas"]["3002"], r.keys[("zhangwei",)]
        (('s2',), ('s1', 's2'))
    """
    raw = _read_rows(path)
    warnings: list[str] = []
    rows, where = _rows_by_id(path, raw, warnings)
    holders, lms_ids = _index(rows)
    warnings += _shared_warnings(holders, lms_ids, where)
    return Roster(rows, {k: tuple(v) for k, v in holders.items()},
                  {lms: {i: tuple(s) for i, s in ids.items()} for lms, ids in lms_ids.items()},
                  warnings, Path(path).name)
