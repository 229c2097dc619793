"""Each found file mapped to one student, by a rule written down, or given the reason why not.

Rules (every decision is written to ``report.csv``; a file that matches no rule is reported as
unmapped, never guessed):

* names an LMS wrote first: the LMS's own fields decide, never the student's original file
  name inside them. Canvas names files ``<name>_<user id>_<submission id>_<original name>``
  (``<name>_LATE_<user id>_...`` when late), Moodle names folders
  ``<full name>_<participant id>_assignsubmission_file_/`` (or flat files with that prefix).
  With a roster, the LMS id is looked up in the roster's ``canvas_id`` (Canvas) or
  ``moodle_id`` / ``participant_id`` (Moodle) column first; a file whose id is on no row is
  mapped by the LMS's name field as a whole, and only to a row without an id of that LMS;
* one folder per student (``SUBMISSIONS/<student>/<any name>.ipynb``): the folder names the
  student; with a roster, the folder must match a roster id, alias, e-mail or name;
* other flat files with a roster: the file name must contain exactly one student's roster id /
  alias / e-mail (or its local part) / name as whole words;
* flat files without a roster: ``<id>.ipynb`` or ``<id>_<anything>.ipynb`` (the name field of a
  Canvas name), unless the name is just the chapter's notebook name (``seq2seq.ipynb``,
  ``Copy of seq2seq.ipynb``, ``seq2seq (1).ipynb``), which names no student;
* two files of one student: the newest (modification time, or the zip entry's date) is graded,
  the other is reported as superseded; files of two different LMS accounts (Canvas user ids,
  Moodle participant ids) are never superseded: mapped to one student, they are a reported
  conflict and neither is graded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from autograder.ingest.roster import LMS_COLUMN, LMS_WHO, Roster, name_words
from autograder.ingest.walk import SubmissionFile

_COPY = re.compile(r"^(copy of )+|\s*\(\d+\)$|\s*-\s*copy$|_\d+$", re.I)
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
        return f"{self.lms} {LMS_WHO[self.lms]} {self.uid}"


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
    who, column = fields.identity, LMS_COLUMN[fields.lms]
    holders = roster.lms_ids[fields.lms].get(fields.uid, ())
    if len(holders) == 1:
        sf.student = holders[0]
        sf.rule = f"{fields.lms} {LMS_WHO[fields.lms]} id {fields.uid} is the roster's {column}"
        return
    if holders:
        sf.problem = (f"the {fields.lms} {LMS_WHO[fields.lms]} id {fields.uid} is on several "
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


def _map_bare_name(sf: SubmissionFile, stem: str, stem_of_notebook: str) -> None:
    """Without a roster: ``<id>.ipynb`` or ``<id>_<anything>.ipynb``, unless the name is only
    the chapter's notebook name (``Copy of seq2seq (1).ipynb``), which names nobody."""
    bare = stem
    while True:
        new = _COPY.sub("", bare).strip()
        if new == bare:
            break
        bare = new
    candidate = stem.split("_", 1)[0].strip()
    if bare.lower() in (stem_of_notebook.lower(), stem_of_notebook.replace("-", "_").lower()):
        sf.problem = ("the file name is the chapter's notebook name and names no "
                      "student: put it in a folder named after the student or pass "
                      "--roster")
    elif re.fullmatch(r"[A-Za-z0-9@.+-]+", candidate):
        sf.student, sf.rule = candidate, "file name (<id> or <id>_...)"
    else:
        sf.problem = "the file name names no student id; pass --roster"


def map_file(sf: SubmissionFile, stem: str, roster: Roster | None) -> None:
    """Map one notebook ``sf`` to its student (or give the reason why not), by the rules above.

    Args:
        sf: a ``.ipynb`` found among the submissions; its ``student``, ``rule``, ``problem`` and
            ``identity`` are set.
        stem: the chapter's notebook name without ``.ipynb`` (``seq2seq``).
        roster: from :func:`autograder.ingest.roster.read_roster`, or ``None``.
    """
    parts = sf.rel.split("/")
    folder = len(parts) > 1
    text = parts[0] if folder else os.path.splitext(parts[-1])[0]
    fields = lms_name(text, folder=folder)
    sf.identity = fields.identity if fields else ""
    if roster is not None and fields:
        _map_lms(sf, fields, roster)
    elif roster is not None and folder:
        _map_by_roster(sf, text, "folder", f"folder {text!r}", roster)
    elif roster is not None:
        _map_by_roster(sf, text, "file name", "file name", roster)
    elif folder:
        sf.student, sf.rule = text, "folder name"
    else:
        _map_bare_name(sf, text, stem)


def one_per_student(files: list[SubmissionFile]) -> None:
    """Keep one file per student: the newest regular file (a link or pipe only when nothing
    else); files of several LMS accounts mapped to one student are a conflict, none kept.

    The files left out lose their ``student`` and get the reason as their ``problem``.
    """
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
