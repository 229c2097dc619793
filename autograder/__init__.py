"""The instructor's grading pipeline of the course (run as ``python -m autograder``).

Commands (see ``autograder/README.md``):

* ``release [CHAPTER ...]``: ``chapters/NN-slug/slug.ipynb`` from ``solutions/NN-slug/slug.ipynb``
  with nbgrader's ``generate_assignment``, byte-for-byte deterministic.
* ``check-release [CHAPTER ...]``: exits non-zero naming every chapter whose release drifted.
* ``grade CHAPTER SUBMISSIONS``: grades a folder (or zip) of submitted notebooks, with the
  hardened engine (sandboxed, judged outside the student's kernel) or stock nbgrader.

Importing the package has no side effects.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
