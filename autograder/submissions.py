"""Finding submitted notebooks, mapping them to students, and validating each file.

Mapping rules (every decision is written to ``report.csv``; a file that matches no rule is
reported as unmapped, never guessed):

* names an LMS wrote first: the LMS's own fields decide, never the student's original file
  name inside them. Canvas names files ``<name>_<user id>_<submission id>_<original name>``
  (``<name>_LATE_<user id>_...`` when late), Moodle names folders
  ``<full name>_<participant id>_assignsubmission_file_/`` (or flat files with that prefix).
  With ``--roster``, the LMS id is looked up in the roster's ``canvas_id`` (Canvas) or
  ``moodle_id`` / ``participant_id`` (Moodle) column first; a file whose id is on no row is
  mapped by the LMS's name field as a whole, and only to a row without an id of that LMS;
* one folder per student (``SUBMISSIONS/<student>/<any name>.ipynb``): the folder names the
  student; with ``--roster``, the folder must match a roster id, alias, e-mail or name;
* other flat files with ``--roster``: the file name must contain exactly one student's roster id /
  alias / e-mail (or its local part) / name as whole words;
* flat files without a roster: ``<id>.ipynb`` or ``<id>_<anything>.ipynb`` (the name field of a
  Canvas name), unless the name is just the chapter's notebook name (``seq2seq.ipynb``,
  ``Copy of seq2seq.ipynb``, ``seq2seq (1).ipynb``), which names no student;
* names are compared after Unicode normalisation (NFC) and case folding on both sides, so a
  macOS zip's decomposed "Zoë" matches the roster's; a name, alias or LMS id several roster
  rows share is listed when the roster is read and never decides alone;
* two files of one student: the newest (modification time, or the zip entry's date) is graded, the
  other is reported as superseded; files of two different LMS accounts (Canvas user ids, Moodle
  participant ids) are never superseded: mapped to one student, they are a reported conflict
  and neither is graded.

Untrusted input is read within bounds, and nothing one file does stops the others:

* submissions are read only as **regular files inside the submissions folder**: the walk never
  follows a symbolic link (a link named like a notebook is mapped to its student and fails with
  "symbolic link", a link to a folder is reported and not entered), files are opened with
  ``O_NOFOLLOW`` and checked to be regular (a named pipe cannot block the grader), and zip entries
  that are links are reported and not extracted;
* the walk goes at most :data:`MAX_WALK_DEPTH` folders deep and reads at most :data:`MAX_ENTRIES`
  entries; a zip holds at most :data:`MAX_ZIP_FILES` entries, each extracted up to
  :data:`MAX_FILE_BYTES` (+1 byte, so that an oversized entry fails validation with its reason);
* a notebook is at most :data:`MAX_FILE_BYTES`, its JSON at most :data:`MAX_JSON_DEPTH` levels
  deep (checked before parsing, so no parser recursion), and it must pass nbformat's schema after
  the upgrade to format 4; the reason of a failure names the cell that is wrong.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import time
import unicodedata
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np

MAX_FILE_BYTES = 20 << 20
MAX_ZIP_BYTES = 2 << 30
MAX_ZIP_FILES = 10_000
MAX_ENTRIES = 20_000
MAX_WALK_DEPTH = 4
MAX_JSON_DEPTH = 100
_COPY = re.compile(r"^(copy of )+|\s*\(\d+\)$|\s*-\s*copy$|_\d+$", re.I)
_SKIP_NAMES = (".ipynb_checkpoints", "__MACOSX")
LINK_REASON = ("the file is a symbolic link, not a notebook: submissions are read only as "
               "regular files inside the submissions folder (upload the notebook itself)")
OTHER_REASON = "not a regular file (a named pipe, socket or device): not read"


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


#: Unicode categories escaped by :func:`printable`: controls (C0, DEL, C1), format characters
#: (the bidi overrides and isolates U+202A-U+202E, U+2066-U+2069, the marks U+200E, U+200F,
#: U+061C, zero-width characters), line and paragraph separators, lone surrogates.
_UNPRINTABLE = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def printable(text: str) -> str:
    """``text`` safe to show on a terminal and write as UTF-8, on one line: every control
    character (C0 such as ESC and newline, DEL, C1), every format character (bidi overrides such
    as U+202E, which reorder what a terminal shows), line separators, and lone surrogates (the
    undecodable bytes of a file name) become backslash escapes.

    Example:
        >>> printable("caf\\udce9 \\x1b[2Jred\\u202egnp.ipynb\\n")
        'caf\\\\udce9 \\\\x1b[2Jred\\\\u202egnp.ipynb\\\\x0a'
    """
    if text.isprintable():  # the common case: no control, format or separator character
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNPRINTABLE else c for c in text)


@dataclass
class SubmissionFile:
    """A file (or zip entry) found among the submissions.

    Attributes:
        path: where it is on disk; ``None`` for a zip entry that was not extracted (a link).
        rel: path relative to the submissions root, printable, for reports.
        mtime: modification time (or the zip entry's date), used to pick a student's newest file.
        student, rule: the student it was mapped to and by which rule.
        problem: why it is not mapped (or not graded).
        irregular: why it is never read, when it is not a regular file (a symbolic link, a named
            pipe): it is mapped to its student like a file and fails with this reason when it
            is the student's only candidate.
        identity: the LMS account that uploaded it, from the LMS's fields in its name
            (``"Canvas user 4711"``, ``"Moodle participant 12"``); ``""`` when the name has
            none. Files of different accounts never supersede each other.
    """

    path: Path | None
    rel: str
    mtime: float
    student: str | None = None
    rule: str = ""
    problem: str = ""
    irregular: str = ""
    identity: str = ""


@dataclass(frozen=True)
class SkippedEntry:
    """A zip entry that was not extracted, and why (reported in report.csv)."""

    name: str
    reason: str
    mtime: float = 0.0
    link: bool = False


def extract_zip(zip_path: Path, dest: Path, skipped: list[SkippedEntry] | None = None) -> Path:
    """Extract an LMS zip safely; return the folder to grade.

    Never extracted (each one appended to ``skipped`` with its reason): absolute or ``..`` names,
    symbolic links, entries that cannot be read (encrypted, corrupt). Each entry is copied up to
    ``MAX_FILE_BYTES + 1`` bytes. Caps: :data:`MAX_ZIP_FILES` entries, :data:`MAX_ZIP_BYTES`
    declared in all.

    Raises:
        SystemExit: the zip itself cannot be read, or is over the caps (the whole batch is bad).
    """
    skipped = [] if skipped is None else skipped
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        z = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as err:
        raise SystemExit(f"{zip_path}: not a readable zip ({err})") from None
    with z:
        infos = z.infolist()
        if len(infos) > MAX_ZIP_FILES:
            raise SystemExit(f"{zip_path}: {len(infos)} entries; at most {MAX_ZIP_FILES}")
        if sum(i.file_size for i in infos) > MAX_ZIP_BYTES:
            raise SystemExit(f"{zip_path}: more than {MAX_ZIP_BYTES >> 30} GiB uncompressed")
        for info in infos:
            name = info.filename.replace("\\", "/")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if not parts or info.is_dir() or parts[0] in _SKIP_NAMES:
                continue
            try:
                stamp = time.mktime(info.date_time + (0, 0, -1))
            except (OverflowError, ValueError):
                stamp = 0.0
            if ".." in parts or name.startswith("/") or ":" in parts[0]:
                skipped.append(SkippedEntry(printable(name), "a path outside the zip's folder "
                                            "(absolute or with ..): not extracted", stamp))
                continue
            mode = info.external_attr >> 16
            if info.create_system == 3 and stat.S_ISLNK(mode):
                skipped.append(SkippedEntry("/".join(parts), "a symbolic link in the zip: not "
                                            "extracted (only regular files are graded)",
                                            stamp, link=True))
                continue
            target = dest.joinpath(*parts)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(_capped(src, MAX_FILE_BYTES + 1), out)
                os.utime(target, (stamp, stamp))
            except (OSError, RuntimeError, ValueError, zipfile.BadZipFile, EOFError) as err:
                skipped.append(SkippedEntry("/".join(parts), f"could not be extracted "
                                            f"({type(err).__name__}: {str(err)[:200]})", stamp))
                if target.is_file():
                    target.unlink()
    # an LMS zip may wrap per-student folders in one top folder: unwrap it
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and any(p.is_dir() for p in entries[0].iterdir()):
        top = entries[0].name + "/"
        skipped[:] = [SkippedEntry(s.name[len(top):], s.reason, s.mtime, s.link)
                      if s.name.startswith(top) else s for s in skipped]
        return entries[0]
    return dest


class _capped:
    """A file-like reader that yields at most ``limit`` bytes of ``src``."""

    def __init__(self, src, limit: int) -> None:
        self.src, self.left = src, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.src.read(n)
        self.left -= len(data)
        return data


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

    Example (``roster.csv`` holding ``student_id,name,canvas_id`` / ``s1,Wei Zhang,3001`` /
    ``s2,Wei Zhang,3002``)::

        >>> r = read_roster(Path("roster.csv"))          # doctest: +SKIP
        >>> r.lms_ids["Canvas"]["3002"], r.keys[("zhangwei",)]  # doctest: +SKIP
        (('s2',), ('s1', 's2'))
    """
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
    rows: dict[str, dict[str, str]] = {}
    where: dict[str, list[int]] = {}
    warnings: list[str] = []
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
    holders: dict[tuple[str, ...], list[str]] = {}
    lms_ids: dict[str, dict[str, list[str]]] = {"Canvas": {}, "Moodle": {}}
    for sid, row in rows.items():
        keys = {name_words(sid)}
        for col in _ALIAS_COLUMNS:
            keys |= {name_words(a) for a in row.get(col, "").replace(";", ",").split(",")}
        email = row.get("email", "")
        if email:
            keys |= {name_words(email), name_words(email.split("@", 1)[0])}
        keys |= _name_keys(row.get("name", ""))
        for key in keys:
            if key:
                holders.setdefault(key, []).append(sid)
        for lms, columns in (("Canvas", CANVAS_ID_COLUMNS), ("Moodle", MOODLE_ID_COLUMNS)):
            for value in {row[c] for c in columns if row.get(c)}:
                lms_ids[lms].setdefault(value, []).append(sid)
    shared: dict[tuple[str, ...], list[str]] = {}
    for key, sids in holders.items():
        if len(sids) > 1:
            shared.setdefault(tuple(sids), []).append(" ".join(key))
    for sids, names in shared.items():
        lines = sorted(line for sid in sids for line in where[sid])
        warnings.append(f"{', '.join(repr(n) for n in sorted(names))} "
                        f"{'is' if len(names) == 1 else 'are'} shared by {', '.join(sids)} "
                        f"({_rows_text(lines)}): a file named by "
                        f"{'it' if len(names) == 1 else 'these'} alone is reported, not mapped "
                        "(give each row its canvas_id or moodle_id, or an alias of its own)")
    for lms, ids in lms_ids.items():
        column = "canvas_id" if lms == "Canvas" else "moodle_id/participant_id"
        for value, sids in ids.items():
            if len(sids) > 1:
                lines = sorted(line for sid in sids for line in where[sid])
                warnings.append(f"{column} {value} is on {_rows_text(lines)} "
                                f"({', '.join(sids)}): files of {lms} {_LMS_WHO[lms]} {value} "
                                "are reported, not mapped")
    return Roster(rows, {k: tuple(v) for k, v in holders.items()},
                  {lms: {i: tuple(s) for i, s in ids.items()} for lms, ids in lms_ids.items()},
                  warnings, Path(path).name)


_LMS_WHO = {"Canvas": "user", "Moodle": "participant"}
_LMS_COLUMN = {"Canvas": "canvas_id", "Moodle": "moodle_id"}
# Canvas: <name>_<user id>_<submission id>_<original name>, or <name>_LATE_<user id>_...
_CANVAS = re.compile(r"(?P<name>.+?)_(?:LATE_)?(?P<uid>\d+)_\d+_(?P<original>.+)", re.S)
# Moodle: <full name>_<participant id>_assignsubmission_<plugin>_ (a folder, or a flat file's
# prefix followed by the original name)
_MOODLE = re.compile(
    r"(?P<name>.+?)_(?P<uid>\d+)_assignsubmission_[A-Za-z]+(?:_(?P<original>.*))?", re.S)


@dataclass(frozen=True)
class LmsName:
    """The fields an LMS wrote into a file or folder name.

    Attributes:
        lms: ``"Canvas"`` or ``"Moodle"``.
        name: the student's name as the LMS wrote it (``doejane``, ``Jane Doe``).
        uid: Canvas's user id, or Moodle's participant id.
    """

    lms: str
    name: str
    uid: str

    @property
    def identity(self) -> str:
        """``"Canvas user 4711"``, ``"Moodle participant 12"``: one LMS account."""
        return f"{self.lms} {_LMS_WHO[self.lms]} {self.uid}"


def lms_name(text: str, folder: bool = False) -> LmsName | None:
    """The LMS fields of a file name (without ``.ipynb``) or of a folder name, else ``None``.

    Canvas names files, Moodle names folders (or flat files, when its download is not in
    folders).

    Example:
        >>> lms_name("doejane_LATE_4711_6001_seq2seq")
        LmsName(lms='Canvas', name='doejane', uid='4711')
        >>> lms_name("Jane Doe_12_assignsubmission_file_", folder=True)
        LmsName(lms='Moodle', name='Jane Doe', uid='12')
    """
    m = _MOODLE.fullmatch(text)
    if m and (folder or m["original"]):
        return LmsName("Moodle", m["name"], m["uid"])
    m = None if folder else _CANVAS.fullmatch(text)
    if m:
        return LmsName("Canvas", m["name"], m["uid"])
    return None


def _map_lms(sf: SubmissionFile, fields: LmsName, roster: Roster) -> None:
    """Map ``sf`` by the LMS's own fields: the LMS id the roster holds first, else the LMS's
    name field as a whole (never the student's original file name); else say why."""
    who, column = fields.identity, _LMS_COLUMN[fields.lms]
    holders = roster.lms_ids[fields.lms].get(fields.uid, ())
    if len(holders) == 1:
        sf.student = holders[0]
        sf.rule = f"{fields.lms} {_LMS_WHO[fields.lms]} id {fields.uid} is the roster's {column}"
        return
    if holders:
        sf.problem = (f"the {fields.lms} {_LMS_WHO[fields.lms]} id {fields.uid} is on several "
                      f"roster rows ({', '.join(holders)}): not mapped")
        return
    named = roster.keys.get(name_words(fields.name), ())
    if not named:
        sf.problem = (f"{who} ({fields.name!r}) is not on the roster: no row has {column} "
                      f"{fields.uid} or the name {fields.name!r} (add the {column} column)")
    elif len(named) > 1:
        sf.problem = (f"the {fields.lms} name {fields.name!r} of {who} is shared by roster "
                      f"entries {', '.join(named)}: not mapped (add the {column} column)")
    elif roster.lms_id_of(fields.lms, named[0]):
        sf.problem = (f"the {fields.lms} name {fields.name!r} is {named[0]}'s, whose {column} "
                      f"is {roster.lms_id_of(fields.lms, named[0])}, not {fields.uid}: "
                      f"{who} is someone else, not mapped")
    else:
        sf.student, sf.rule = named[0], f"{fields.lms} name matches the roster"


def _roster_match(text: str, roster: Roster) -> tuple[set[str], list[tuple[str, tuple[str, ...]]]]:
    """The students ``text`` names by a key of theirs alone, and the shared keys it holds.

    Keys match whole words only (``Ann Lee`` is not in ``Joann Leeds``).
    """
    words = name_words(text)
    longest = roster.longest
    unique: set[str] = set()
    shared: list[tuple[str, tuple[str, ...]]] = []
    for i in range(len(words)):
        for n in range(1, min(longest, len(words) - i) + 1):
            sids = roster.keys.get(words[i:i + n], ())
            if len(sids) == 1:
                unique.add(sids[0])
            elif sids:
                shared.append((" ".join(words[i:i + n]), sids))
    return unique, shared


def _map_by_roster(sf: SubmissionFile, text: str, kind: str, subject: str,
                   roster: Roster) -> None:
    """Map ``sf`` to the one roster entry ``text`` (a folder or file name) names, else say why.

    A key several rows share (two students named "Wei Zhang") decides nothing by itself; a key
    of one student's own decides when every shared key in ``text`` is that student's too.
    """
    unique, shared = _roster_match(text, roster)
    if len(unique) == 1 and all(unique <= set(sids) for _, sids in shared):
        sf.student, sf.rule = unique.pop(), f"{kind} matches the roster"
    elif not unique and shared:
        key, sids = shared[0]
        sf.problem = (f"{subject} names {key!r}, which roster entries {', '.join(sids)} share: "
                      "not mapped (give each an alias, canvas_id or moodle_id of its own)")
    else:
        sf.problem = f"{subject} matches {'no' if not unique else 'several'} roster entries"


@dataclass
class _Entry:
    path: Path | None
    rel: str
    mtime: float
    kind: str  # "file", "link", "other": what lstat says (a zip link is "link", path None)


def _walk(root: Path, notes: list[SubmissionFile]) -> list[_Entry]:
    """Regular files and links under ``root`` without following any link, within the caps.

    Hidden names, ``.ipynb_checkpoints`` and ``__MACOSX`` are skipped. Links to folders, folders
    too deep, unreadable folders and the entries past :data:`MAX_ENTRIES` are added to ``notes``.
    """
    found: list[_Entry] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            rel = printable(folder.relative_to(root).as_posix())
            notes.append(SubmissionFile(None, rel, 0.0, problem=f"folder could not be read "
                                        f"({err.strerror or err})"))
            continue
        subfolders = []
        for entry in entries:
            if entry.name.startswith(".") or entry.name in _SKIP_NAMES:
                continue
            seen += 1
            path = Path(entry.path)
            rel = printable(path.relative_to(root).as_posix())
            if seen > MAX_ENTRIES:
                notes.append(SubmissionFile(None, rel, 0.0, problem=f"more than {MAX_ENTRIES} "
                                            "entries in the submissions folder: not read"))
                return found
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_WALK_DEPTH:
                    notes.append(SubmissionFile(None, rel + "/", st.st_mtime, problem=(
                        f"folder more than {MAX_WALK_DEPTH} levels deep: not read")))
                else:
                    subfolders.append((path, depth + 1))
            elif stat.S_ISLNK(st.st_mode):
                if path.suffix.lower() == ".ipynb":
                    found.append(_Entry(path, rel, st.st_mtime, "link"))
                else:
                    notes.append(SubmissionFile(None, rel, st.st_mtime, irregular=LINK_REASON,
                                                problem="a symbolic link: not followed "
                                                "(submissions are read only as regular files "
                                                "inside the submissions folder)"))
            elif stat.S_ISREG(st.st_mode):
                found.append(_Entry(path, rel, st.st_mtime, "file"))
            else:
                found.append(_Entry(path, rel, st.st_mtime, "other"))
        stack.extend(reversed(subfolders))
    return found


def discover(root: Path, slug: str, roster: Roster | None,
             skipped: list[SkippedEntry] | None = None) -> list[SubmissionFile]:
    """Every ``.ipynb`` under ``root``, mapped to a student id or given a problem.

    A name with an LMS's fields (:func:`lms_name`) is mapped by them: with a roster, by the
    LMS id the roster holds, else by the LMS's name field as a whole; the original file name
    inside it never decides. Two files of one student from different LMS accounts are a
    conflict: neither is graded, both are reported.

    Args:
        roster: from :func:`read_roster`; ``None`` maps by folder or ``<id>_...`` file name.
        skipped: zip entries that were not extracted (:func:`extract_zip`); a link among them is
            mapped like a file (and fails as a link), the others are reported as they are.

    Example (``subs/`` holding ``doejane_4711_6001_seq2seq.ipynb``)::

        >>> [(f.student, f.identity) for f in discover(Path("subs"), "seq2seq", None)]
        ... # doctest: +SKIP
        [('doejane', 'Canvas user 4711')]
    """
    files: list[SubmissionFile] = []
    entries = _walk(root, files)
    for s in skipped or []:
        if s.link and s.name.lower().endswith(".ipynb"):
            entries.append(_Entry(None, s.name, s.mtime, "link"))
        else:
            files.append(SubmissionFile(None, s.name, s.mtime, problem=s.reason,
                                        irregular=LINK_REASON if s.link else ""))
    for entry in entries:
        rel = entry.rel
        name = rel.rsplit("/", 1)[-1]
        irregular = {"link": LINK_REASON, "other": OTHER_REASON}.get(entry.kind, "")
        sf = SubmissionFile(entry.path, rel, entry.mtime, irregular=irregular)
        suffix = os.path.splitext(name)[1].lower()
        if suffix != ".ipynb":
            if sf.irregular:
                sf.problem = sf.irregular
                files.append(sf)
                continue
            if suffix in (".json", ".txt", ".py", ".zip", ""):
                sf.problem = "not a .ipynb file"
                files.append(sf)
            continue
        parts = rel.split("/")
        if len(parts) > 1:
            folder = parts[0]
            fields = lms_name(folder, folder=True)
            sf.identity = fields.identity if fields else ""
            if roster is not None and fields:
                _map_lms(sf, fields, roster)
            elif roster is not None:
                _map_by_roster(sf, folder, "folder", f"folder {folder!r}", roster)
            else:
                sf.student, sf.rule = folder, "folder name"
        else:
            stem = os.path.splitext(name)[0]
            fields = lms_name(stem)
            sf.identity = fields.identity if fields else ""
            if roster is not None and fields:
                _map_lms(sf, fields, roster)
            elif roster is not None:
                _map_by_roster(sf, stem, "file name", "file name", roster)
            else:
                bare = stem
                while True:
                    new = _COPY.sub("", bare).strip()
                    if new == bare:
                        break
                    bare = new
                candidate = stem.split("_", 1)[0].strip()
                if bare.lower() in (slug.lower(), slug.replace("-", "_").lower()):
                    sf.problem = ("the file name is the chapter's notebook name and names no "
                                  "student: put it in a folder named after the student or pass "
                                  "--roster")
                elif re.fullmatch(r"[A-Za-z0-9@.+-]+", candidate):
                    sf.student, sf.rule = candidate, "file name (<id> or <id>_...)"
                else:
                    sf.problem = "the file name names no student id; pass --roster"
        files.append(sf)
    # one file per student: the newest regular file (a link or pipe only when nothing else)
    by_student: dict[str, list[SubmissionFile]] = {}
    for sf in files:
        if sf.student:
            by_student.setdefault(sf.student, []).append(sf)
    for sid, group in by_student.items():
        accounts = sorted({sf.identity for sf in group if sf.identity})
        if len(accounts) > 1:
            for sf in group:
                sf.problem = (f"conflict: files of {len(accounts)} LMS accounts "
                              f"({', '.join(accounts)}) map to {sid}; none is graded, since "
                              "whose file is whose cannot be told (give the roster the "
                              "canvas_id or moodle_id column)")
                sf.student = None
            continue
        if len(group) > 1:
            group.sort(key=lambda s: (not s.irregular, s.mtime, s.rel))
            for old in group[:-1]:
                if old.irregular:
                    old.problem = f"{old.irregular}; {group[-1].rel} of {sid} was graded instead"
                else:
                    old.problem = f"superseded by the newer {group[-1].rel} of {sid}"
                old.student = None
    return files


class InvalidSubmission(Exception):
    """The file cannot be graded; the message says why in words a student understands.

    Attributes:
        digest: the sha256 of the bytes read (the cache key), or ``""`` when nothing was read.
    """

    def __init__(self, message: str, digest: str = "") -> None:
        super().__init__(message)
        self.digest = digest


def read_regular_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path``, read only if it is a regular file (never through a link).

    At most ``max_bytes + 1`` bytes are read, so an oversized file costs no more than that.

    Raises:
        InvalidSubmission: a link, not a regular file, unreadable, empty or too large.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InvalidSubmission(LINK_REASON) from None
        raise InvalidSubmission(f"the file could not be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InvalidSubmission(OTHER_REASON)
        raw = f.read(max_bytes + 1)
    digest = hashlib.sha256(raw).hexdigest()
    if not raw:
        raise InvalidSubmission("the file is empty (0 bytes)", digest)
    if len(raw) > max_bytes:
        raise InvalidSubmission(f"the file is larger than the {max_bytes / 2**20:.0f} MiB limit "
                                "(clear the outputs and resubmit)", digest)
    return raw


# A JSON string, or an unterminated one up to the end. The possessive quantifiers and the
# match-to-the-end make every attempt succeed without backtracking, so the scan is linear even
# for hostile text like '"\\"\\"\\"...' (a plain string pattern takes quadratic time on it).
_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest, without parsing it.

    Brackets inside strings do not count; for malformed text the answer may be too high, never
    too low, so it is a safe bound before a recursive parser runs.

    Example:
        >>> json_depth(b'{"a": [1, {"b": "]]"}]}')
        3
    """
    bare = np.frombuffer(_JSON_STRING.sub(b"", raw), dtype=np.uint8)
    if bare.size == 0:
        return 0
    step = ((bare == ord("[")) | (bare == ord("{"))).astype(np.int32) \
        - ((bare == ord("]")) | (bare == ord("}"))).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _json_kind(value: object) -> str:
    for kind, words in ((dict, "an object"), (list, "a list holding something other than strings"),
                        (str, "a string"), (bool, "a boolean"), (type(None), "null")):
        if isinstance(value, kind):
            return words
    return "a number"


def _describe_validation_error(err: Exception, nb: dict) -> str:
    path = list(getattr(err, "absolute_path", None) or getattr(err, "path", None) or [])
    message = str(getattr(err, "message", "") or str(err).split("\n", 1)[0])[:200]
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        k = path[1]
        cell = nb["cells"][k] if k < len(nb.get("cells", [])) else {}
        kind = cell.get("cell_type", "?") if isinstance(cell, dict) else "?"
        where = "/".join(str(p) for p in path[2:]) or "the cell itself"
        if path[2:] == ["source"] and isinstance(cell, dict):
            message = (f"the source must be text (a string or a list of strings), not "
                       f"{_json_kind(cell.get('source'))}")
        return (f"cell {k + 1} ({kind} cell) is not valid in a Jupyter notebook: {where}: "
                f"{message}")
    where = "/".join(str(p) for p in path) or "the top level"
    return f"the notebook is not valid nbformat ({where}: {message})"


def load_notebook(path: Path, max_bytes: int = MAX_FILE_BYTES) -> tuple[nbformat.NotebookNode, list[str], str]:
    """Read, bound, validate and normalise a submitted notebook.

    Steps: a regular file only (:func:`read_regular_file`), UTF-8, JSON at most
    :data:`MAX_JSON_DEPTH` levels deep, a notebook, upgraded to nbformat 4, then validated
    against nbformat's schema (a notebook with cell ids but ``nbformat_minor`` below 5 is read
    as 4.5, what Jupyter does).

    Returns:
        ``(notebook as nbformat v4, notes on repairs, sha256 of the file)``.

    Raises:
        InvalidSubmission: with the reason and the file's digest.
    """
    raw = read_regular_file(path, max_bytes)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        return _parse_notebook(raw, digest)
    except InvalidSubmission:
        raise
    except (RecursionError, MemoryError) as err:
        raise InvalidSubmission(f"the notebook is too deeply nested or too large to read "
                                f"({type(err).__name__})", digest) from None


def _parse_notebook(raw: bytes, digest: str) -> tuple[nbformat.NotebookNode, list[str], str]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidSubmission("the file is not text (UTF-8)", digest) from None
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise InvalidSubmission(f"the file nests JSON {depth} levels deep; a notebook needs "
                                f"far fewer (at most {MAX_JSON_DEPTH} are read)", digest)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise InvalidSubmission(f"the file is not valid JSON ({str(err)[:200]})", digest) from None
    if not isinstance(data, dict) or ("cells" not in data and "worksheets" not in data):
        raise InvalidSubmission("the file is JSON but not a Jupyter notebook (no cells)", digest)
    notes = []
    major = data.get("nbformat")
    if type(major) is not int or not 1 <= major <= 4:
        raise InvalidSubmission(f"the file says it is in notebook format {str(major)[:20]}; "
                                "Jupyter notebooks are in format 4 (or an older 1 to 3)", digest)
    try:  # nbformat.reads without its own validation (done once, below, with the cell named)
        nb = nbformat.convert(nbformat.from_dict(data), 4)
    except Exception as err:  # noqa: BLE001 - nbformat raises many kinds
        raise InvalidSubmission(f"the notebook could not be read ({type(err).__name__}: "
                                f"{str(err)[:200]})", digest) from None
    if major != 4:
        notes.append(f"the notebook was in format {major}; it was upgraded to format 4")
    cells = nb.get("cells")
    if isinstance(cells, list) and nb.get("nbformat_minor", 0) < 5 and any(
            isinstance(c, dict) and "id" in c for c in cells):
        nb["nbformat_minor"] = 5  # ids belong to 4.5; Jupyter reads such a file as 4.5
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except nbformat.ValidationError as err:
        raise InvalidSubmission(_describe_validation_error(err, nb), digest) from None
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        cell.setdefault("metadata", {})
    return nb, notes, digest
