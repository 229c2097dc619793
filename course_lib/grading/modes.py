"""How a kernel is graded: the environment variables the graders set, and what they mean.

* ``COURSE_GRADING_MODE`` (:data:`MODE_ENV`): ``compare`` (the default: plain nbgrader, nbval, a
  student's own kernel) checks in the kernel; ``record`` (the instructor's hardened grader) only
  records the student's outputs for the trusted judge.
* ``COURSE_GRADING_RECORD_DIR`` and ``COURSE_GRADING_INPUT_DIR``: record mode's output folder and
  the folder of the hidden cases' inputs, written by the trusted process.
* ``NBGRADER_EXECUTION``: set by stock nbgrader while it autogrades.
"""

from __future__ import annotations

import os

MODE_ENV = "COURSE_GRADING_MODE"
RECORD_DIR_ENV = "COURSE_GRADING_RECORD_DIR"
#: Record mode: the folder of the hidden cases' inputs, written by the trusted process.
INPUT_DIR_ENV = "COURSE_GRADING_INPUT_DIR"
#: Set by stock nbgrader while it autogrades (``nbgrader autograde``): visible tests then fail on a
#: blank exercise instead of reporting it as not attempted.
NBGRADER_ENV = "NBGRADER_EXECUTION"


def grading_mode() -> str:
    """``"record"`` under the hardened grader, else ``"compare"`` (the value of :data:`MODE_ENV`).

    Example:
        >>> import os
        >>> grading_mode() if MODE_ENV not in os.environ else "compare"
        'compare'
    """
    return os.environ.get(MODE_ENV, "compare")


def under_grader() -> bool:
    """Whether a grader runs this kernel (stock nbgrader's autograde, or the hardened record
    mode)."""
    return bool(os.environ.get(NBGRADER_ENV)) or grading_mode() == "record"
