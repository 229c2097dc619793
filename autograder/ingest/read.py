"""A mapped file read into a :class:`~autograder.results.Submission`: its notebook, or why not.

A link, a pipe or a zip entry that was not extracted is never opened: its reason is the
submission's, with a digest of that reason as its cache key (so the same failure is cached).
"""

from __future__ import annotations

import hashlib

from autograder.ingest.validate import InvalidSubmission, load_notebook
from autograder.ingest.walk import SubmissionFile
from autograder.results import Submission


def read_submission(sf: SubmissionFile) -> Submission:
    """Read and validate the file ``sf`` mapped to a student.

    Args:
        sf: a file with its ``student`` set (:func:`autograder.ingest.discover.discover`).

    Returns:
        The submission: its notebook and the notes of its repairs, or ``invalid`` with the
        reason in words a student understands. Never raises for a bad file.
    """
    student = sf.student or ""
    try:
        if sf.irregular or sf.path is None:
            reason = sf.irregular or "the file was not extracted"
            raise InvalidSubmission(reason, hashlib.sha256(reason.encode()).hexdigest())
        nb, notes, digest = load_notebook(sf.path)
    except InvalidSubmission as err:
        return Submission(student, sf.rel, err.digest, invalid=str(err))
    except Exception as err:  # noqa: BLE001 - one file never stops the batch
        return Submission(student, sf.rel, "", invalid=f"the file could not be read "
                          f"({type(err).__name__})")
    return Submission(student, sf.rel, digest, nb, notes)
