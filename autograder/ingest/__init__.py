"""Stage 1 of grading, ingest: find the submitted files, map them to students, validate each.

Modules, one job each:

* :mod:`~autograder.ingest.walk`: the submissions folder walked without following a link;
* :mod:`~autograder.ingest.unzip`: an LMS zip extracted safely;
* :mod:`~autograder.ingest.roster`: the roster read, with every name a student goes by;
* :mod:`~autograder.ingest.mapping`: each file mapped to one student by a stated rule;
* :mod:`~autograder.ingest.discover`: the three above together, one file per student;
* :mod:`~autograder.ingest.validate`: each file read within bounds and checked as a notebook;
* :mod:`~autograder.ingest.read`: a mapped file as a :class:`~autograder.results.Submission`.

Untrusted input is read within bounds, and nothing one file does stops the others: every
problem becomes that file's reason in ``report.csv``.
"""

from autograder.ingest.discover import discover
from autograder.ingest.mapping import LmsName, lms_name
from autograder.ingest.read import read_submission
from autograder.ingest.roster import (
           Roster,
           RosterError,
           name_words,
           normalise,
           read_roster,
)
from autograder.ingest.unzip import extract_zip
from autograder.ingest.validate import (
           InvalidSubmission,
           json_depth,
           load_notebook,
           read_regular_file,
)
from autograder.ingest.walk import SkippedEntry, SubmissionFile

__all__ = ["InvalidSubmission", "LmsName", "Roster", "RosterError", "SkippedEntry",
           "SubmissionFile", "discover", "extract_zip", "json_depth", "lms_name",
           "load_notebook", "name_words", "normalise", "read_regular_file", "read_roster",
           "read_submission"]
