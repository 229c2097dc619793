"""nbgrader configuration and course directories for the release and the stock grading engine.

nbgrader wants one course directory ``root/{source,release,submitted,autograded,feedback}/
<assignment>/``. The course's own layout is different (``solutions/`` and ``chapters/``), so every
nbgrader run here builds a throwaway course directory in a temporary folder, with its own
throwaway gradebook, and copies what it needs in and out. Nothing nbgrader writes ever lands in the
repository except through :mod:`publish.release`'s normalised writer.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path

import nbgrader.api
from traitlets.config import Config


def setup_alembic() -> None:
    """Make nbgrader's gradebook find and ask the ``alembic`` script, once per process.

    The gradebook runs ``alembic heads`` (a 1-3 s subprocess) each time it opens a new database,
    and every release opens a fresh one: put this interpreter's bin/ on PATH so that the script
    is found, and remember its answer, which is fixed for the installed nbgrader.
    """
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    if not hasattr(nbgrader.api.get_alembic_version, "cache_info"):
        nbgrader.api.get_alembic_version = functools.lru_cache(maxsize=1)(
            nbgrader.api.get_alembic_version)


def nbgrader_config(root: Path, *, timeout: int = 600, db_url: str | None = None) -> Config:
    """The nbgrader configuration of the course, rooted at a (temporary) course directory.

    Args:
        root: the course directory (holding ``source/``, ``release/``, ``submitted/``...).
        timeout: per-cell timeout of stock autograde, in seconds (nbgrader's default is 30, too
            short for a chapter's demos on a 2-core CPU).
        db_url: the gradebook; default ``sqlite:///<root>/gradebook.db``.
    """
    (Path(root) / "exchange").mkdir(parents=True, exist_ok=True)  # NbGraderAPI lists it on start
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = "source"
    c.CourseDirectory.release_directory = "release"
    c.CourseDirectory.submitted_directory = "submitted"
    c.CourseDirectory.autograded_directory = "autograded"
    c.CourseDirectory.feedback_directory = "feedback"
    c.CourseDirectory.db_url = db_url or f"sqlite:///{Path(root) / 'gradebook.db'}"
    c.CourseDirectory.course_id = "attention-course"
    # Only the notebook itself: no data files are copied between the stages.
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]
    c.CourseDirectory.include = ["*.ipynb"]
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    c.ClearSolutions.enforce_metadata = True
    c.Execute.timeout = timeout
    c.Execute.allow_errors = True
    c.Execute.interrupt_on_timeout = True
    c.Exchange.root = str(Path(root) / "exchange")
    c.NbGraderAPI.log_level = logging.ERROR
    return c
