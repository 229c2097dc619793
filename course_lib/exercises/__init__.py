"""Graded exercises, one module per chapter: ``course_lib.exercises.<chapter>.EXERCISES``.

Each module registers :class:`course_lib.grading.Exercise` objects (reference implementation,
seeded hidden cases, points, a diagnosis of common mistakes) under ids ``"<chapter>.<name>"``,
which the hidden test cells of the chapter's notebook pass to :func:`course_lib.grading.check`.
``<chapter>`` is the chapter's slug without its number, with ``_`` for ``-``
(``01-seq2seq`` -> ``seq2seq``).
"""
