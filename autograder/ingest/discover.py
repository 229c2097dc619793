"""Every ``.ipynb`` of the submissions folder (or of an extracted zip), mapped to its student.

:func:`discover` walks the folder (:mod:`autograder.ingest.walk`), adds the zip entries that
were not extracted (:mod:`autograder.ingest.unzip`), maps each notebook to a student
(:mod:`autograder.ingest.mapping`) and keeps one file per student.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.ingest.mapping import map_file, one_per_student
from autograder.ingest.roster import Roster
from autograder.ingest.walk import (
    LINK_REASON,
    Entry,
    SkippedEntry,
    SubmissionFile,
    walk,
)


def _entries(root: Path, files: list[SubmissionFile],
             skipped: list[SkippedEntry]) -> list[Entry]:
    """The walk's candidate files and the zip's links named like notebooks; the other skipped
    zip entries go straight to ``files`` with their reason."""
    entries = walk(root, files)
    for s in skipped:
        if s.link and s.name.lower().endswith(".ipynb"):
            entries.append(Entry(None, s.name, s.mtime, "link"))
        else:
            files.append(SubmissionFile(None, s.name, s.mtime, problem=s.reason,
                                        irregular=LINK_REASON if s.link else ""))
    return entries


def _candidate(entry: Entry) -> SubmissionFile | None:
    """The entry as a file to map (a ``.ipynb``), as a reported non-notebook, or ``None``
    (other files are silently left out: images, data files)."""
    sf = SubmissionFile(entry.path, entry.rel, entry.mtime, irregular=entry.irregular)
    suffix = os.path.splitext(entry.rel.rsplit("/", 1)[-1])[1].lower()
    if suffix == ".ipynb":
        return sf
    if sf.irregular:
        sf.problem = sf.irregular
        return sf
    if suffix in (".json", ".txt", ".py", ".zip", ""):
        sf.problem = "not a .ipynb file"
        return sf
    return None


def discover(root: Path, stem: str, roster: Roster | None,
             skipped: list[SkippedEntry] | None = None) -> list[SubmissionFile]:
    """Every ``.ipynb`` under ``root``, mapped to a student id or given a problem.

    A name with an LMS's fields (:func:`autograder.ingest.mapping.lms_name`) is mapped by them:
    with a roster, by the LMS id the roster holds, else by the LMS's name field as a whole; the
    original file name inside it never decides. Two files of one student from different LMS
    accounts are a conflict: neither is graded, both are reported.

    Args:
        root: the submissions folder.
        stem: the chapter's notebook name without ``.ipynb`` (``seq2seq``): a file named only
            that names nobody.
        roster: from :func:`autograder.ingest.roster.read_roster`; ``None`` maps by folder or
            ``<id>_...`` file name.
        skipped: zip entries that were not extracted (:func:`autograder.ingest.unzip.extract_zip`);
            a link among them is mapped like a file (and fails as a link), the others are
            reported as they are.

    Returns:
        Every file found, each with its student (the one graded) or its problem.

    Example:
        >>> import tempfile
        >>> subs = Path(tempfile.mkdtemp())
        >>> _ = (subs / "doejane_4711_6001_seq2seq.ipynb").write_text("{}")
        >>> [(f.student, f.identity) for f in discover(subs, "seq2seq", None)]
        [('doejane', 'Canvas user 4711')]
    """
    files: list[SubmissionFile] = []
    for entry in _entries(root, files, skipped or []):
        sf = _candidate(entry)
        if sf is None:
            continue
        if not sf.problem:
            map_file(sf, stem, roster)
        files.append(sf)
    one_per_student(files)
    return files
