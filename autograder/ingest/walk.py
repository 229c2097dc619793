"""What the submissions folder holds, walked without following a link and within caps.

The walk never follows a symbolic link (a link named like a notebook is listed as a ``"link"``
entry, mapped to its student like a file and failing as a link; a link to a folder is reported
and not entered), goes at most :data:`MAX_WALK_DEPTH` folders deep and reads at most
:data:`MAX_ENTRIES` entries.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from autograder.printable import printable

MAX_ENTRIES = 20_000
MAX_WALK_DEPTH = 4
#: Names never read: notebook checkpoints and macOS zip metadata (hidden names are skipped too).
SKIP_NAMES = (".ipynb_checkpoints", "__MACOSX")
LINK_REASON = ("the file is a symbolic link, not a notebook: submissions are read only as "
               "regular files inside the submissions folder (upload the notebook itself)")
OTHER_REASON = "not a regular file (a named pipe, socket or device): not read"


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


@dataclass
class Entry:
    """One candidate file of the walk.

    Attributes:
        path: where it is (``None`` for a zip link that was not extracted).
        rel: printable path relative to the submissions root.
        mtime: modification time.
        kind: ``"file"``, ``"link"`` or ``"other"``: what ``lstat`` says.
    """

    path: Path | None
    rel: str
    mtime: float
    kind: str

    @property
    def irregular(self) -> str:
        """Why the entry is never read (``""`` for a regular file)."""
        return {"link": LINK_REASON, "other": OTHER_REASON}.get(self.kind, "")


def _scan(folder: Path, root: Path, notes: list[SubmissionFile]) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` by name, hidden and skipped names left out; unreadable: noted."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as err:
        rel = printable(folder.relative_to(root).as_posix())
        notes.append(SubmissionFile(None, rel, 0.0, problem=f"folder could not be read "
                                    f"({err.strerror or err})"))
        return []
    return [e for e in entries if not (e.name.startswith(".") or e.name in SKIP_NAMES)]


def _classify(entry: os.DirEntry[str], rel: str, depth: int, found: list[Entry],
              notes: list[SubmissionFile]) -> bool:
    """File ``entry`` as found, noted or (returned True) a folder to enter, by its ``lstat``."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    path = Path(entry.path)
    if stat.S_ISDIR(st.st_mode):
        if depth + 1 < MAX_WALK_DEPTH:
            return True
        notes.append(SubmissionFile(None, rel + "/", st.st_mtime, problem=(
            f"folder more than {MAX_WALK_DEPTH} levels deep: not read")))
    elif stat.S_ISLNK(st.st_mode) and path.suffix.lower() != ".ipynb":
        notes.append(SubmissionFile(None, rel, st.st_mtime, irregular=LINK_REASON,
                                    problem="a symbolic link: not followed (submissions are "
                                    "read only as regular files inside the submissions folder)"))
    else:
        kind = "link" if stat.S_ISLNK(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) \
            else "other"
        found.append(Entry(path, rel, st.st_mtime, kind))
    return False


def walk(root: Path, notes: list[SubmissionFile]) -> list[Entry]:
    """Regular files and links under ``root`` without following any link, within the caps.

    Hidden names, ``.ipynb_checkpoints`` and ``__MACOSX`` are skipped. Links to folders, folders
    too deep, unreadable folders and the entries past :data:`MAX_ENTRIES` are added to ``notes``.

    Args:
        root: the submissions folder.
        notes: where entries that are reported but never read are appended.

    Returns:
        The candidate files, folder by folder in name order.
    """
    found: list[Entry] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        subfolders = []
        for entry in _scan(folder, root, notes):
            seen += 1
            rel = printable(Path(entry.path).relative_to(root).as_posix())
            if seen > MAX_ENTRIES:
                notes.append(SubmissionFile(None, rel, 0.0, problem=f"more than {MAX_ENTRIES} "
                                            "entries in the submissions folder: not read"))
                return found
            if _classify(entry, rel, depth, found, notes):
                subfolders.append((Path(entry.path), depth + 1))
        stack.extend(reversed(subfolders))
    return found
