"""The instructor's grading pipeline of the course (run as ``python -m autograder``).

Commands (see ``autograder/README.md``):

* ``grade CHAPTER SUBMISSIONS``: grades a folder (or zip) of submitted notebooks, with the
  hardened engine (sandboxed, judged outside the student's kernel) or stock nbgrader.

Publishing the releases (and checking them) is ``python -m publish``, beside this package.
Importing the package has no side effects.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
