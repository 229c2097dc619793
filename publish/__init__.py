"""Publishing the course: student releases and their Colab copies (``python -m publish``).

Everything here writes generated files only (``chapters/``, ``colab/``, ``_data/measured/``) and
never a hand-edited one (``solutions/``, ``README.md``, ``_config.yml``); grading lives beside it,
in ``autograder/``. Commands (:mod:`publish.cli`):

* ``release [CHAPTER ...]``: ``chapters/<slug>/<stem>.ipynb`` from ``solutions/<slug>/<stem>.ipynb``
  with nbgrader's ``generate_assignment`` (:mod:`publish.release`), and its Colab copy
  ``colab/<slug>/<stem>.ipynb`` in plain Jupyter markdown (:mod:`publish.colab`);
* ``check [CHAPTER ...]``: exits 1 naming every generated notebook that drifted from its source
  (:mod:`publish.drift`);
* ``measure [CHAPTER ...]``: ``_data/measured/<stem>.json``, the numbers of the Colab copies' prose,
  from the executed book (:mod:`publish.measured`).

Generated notebooks are written by :func:`coursebook.notebooks.write`: one source line per line,
normalised, so the same source gives the same bytes and a diff shows the lines that changed.
Importing the package has no side effects.
"""
