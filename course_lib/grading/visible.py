"""Visible tests: a blank exercise does not stop "Run All".

Visible tests run inside :func:`visible_tests`, so that "Run All" on a blank release runs the
whole chapter: an exercise whose solution cell still holds nbgrader's stub is reported as not
attempted (and the cell does not fail), except under a grader, where it fails as before and
earns 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from course_lib.grading.modes import under_grader


def _is_blank_stub(err: BaseException, name: str) -> bool:
    """Whether ``err`` is nbgrader's stub (``raise NotImplementedError()``) in function ``name``."""
    if type(err) is not NotImplementedError or err.args:
        return False
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == name


@contextmanager
def visible_tests(exercise_id: str) -> Iterator[None]:
    """Run an exercise's visible tests; a blank exercise is reported, not raised.

    Wrap the visible part of a test cell::

        with grading.visible_tests("seq2seq.sequence_loss"):
            assert sequence_loss(...).shape == ()

    * all assertions pass: prints ``visible tests passed``;
    * a wrong attempt: the assertion (or the student's error) propagates, loudly, as always;
    * the solution cell still holds nbgrader's stub (``raise NotImplementedError()`` in the
      exercise's own function): prints that the exercise is not attempted yet and lets "Run All"
      go on; under a grader (:func:`~course_lib.grading.modes.under_grader`) the error
      propagates, so the exercise gets 0.

    Example:
        >>> def f():
        ...     raise NotImplementedError()
        >>> with visible_tests("toy.f"):
        ...     f()
        toy.f: not attempted yet (this exercise scores 0 until you write it in the cell above)
    """
    name = exercise_id.split(".", 1)[-1]
    try:
        yield
    except NotImplementedError as err:
        if under_grader() or not _is_blank_stub(err, name):
            raise
        print(f"{exercise_id}: not attempted yet (this exercise scores 0 until you write it in "
              "the cell above)")
        return
    print("visible tests passed")
