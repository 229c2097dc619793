"""Every exercise statement says what the student may use (issue 27, item 1).

The grading sandbox holds torch, numpy, Python's standard library and the course's grading code,
nothing else (``autograder/run/environment.py``, ``autograder/strip.py``); each statement says so
in a line of its own, ``**You may use:** ...``, which names anything more it allows. Checked on
every source notebook found by glob, the markdown cell just before each solution cell.
"""

from __future__ import annotations

import nbformat
import pytest

from coursebook.chapters import all_chapters

CHAPTERS = all_chapters()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_every_statement_says_what_may_be_used(chapter) -> None:
    nb = nbformat.read(chapter.source, as_version=4)
    missing = []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("solution") and not meta.get("grade")):
            continue
        before = nb.cells[i - 1] if i else None
        lines = before.source.splitlines() if before is not None and \
            before.cell_type == "markdown" else []
        if not any(line.startswith("**You may use:**") for line in lines):
            missing.append(meta.get("grade_id"))
    assert not missing, f"{chapter.slug}: statements without a '**You may use:**' line: {missing}"
