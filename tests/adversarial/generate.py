"""Bad (and good) submissions built from a chapter's real release, each with the grade it must get.

``build_suite(chapter, ...)`` returns :class:`Submission` objects: a folder name (the student id),
a file name, the bytes of the file, the points each exercise must get and why. Everything is
derived from the chapter's source and release (function names, grade ids, points), so the suite
runs on chapter 1 when it exists and on the test fixture chapter before that.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from autograder.chapter_spec import ChapterSpec, load_chapter_spec
from coursebook.chapters import Chapter
from tests.fixtures.colab.transform import colab_transform

MARKER = "autograder-adversarial-detached-child"


@dataclass
class Submission:
    student: str
    filename: str
    content: bytes
    expected: dict[str, float]  # exercise id -> points
    why: str
    invalid: bool = False
    extra: dict = field(default_factory=dict)
    #: False for an entry that names no submission of its own (a link to a folder): it is
    #: reported in report.csv and summary.html, and has no row in grades.csv.
    in_grades: bool = True


def renamed_copy(source: str) -> str:
    """``source`` disguised as a copier would: every local name renamed, docstrings and comments
    dropped, the layout redone (``ast.unparse``). Top-level function names and their parameters
    stay, since the grader calls the function by name with keyword arguments.

    Example:
        >>> print(renamed_copy(
        ...     'def f(x):\\n    "Doc."\\n    total = x + 1  # one more\\n    return total'))
        def f(x):
            v0_total = x + 1
            return v0_total
        <BLANKLINE>
    """
    tree = ast.parse(source)
    keep: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            keep.add(node.name)
            args = node.args
            keep |= {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            keep |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    local: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.add(node.name)
    names = {old: f"v{i}_{old}" for i, old in enumerate(sorted(local - keep))}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = names.get(node.id, node.id)
            return node

        def visit_arg(self, node: ast.arg) -> ast.arg:
            node.arg = names.get(node.arg, node.arg)
            return node

        def _def(self, node):
            node.name = names.get(node.name, node.name)
            if (node.body and isinstance(node.body[0], ast.Expr)
                    and isinstance(node.body[0].value, ast.Constant)
                    and isinstance(node.body[0].value.value, str)):
                node.body = node.body[1:] or [ast.Pass()]
            self.generic_visit(node)
            return node

        visit_FunctionDef = visit_AsyncFunctionDef = _def

    return ast.unparse(ast.fix_missing_locations(Rename().visit(tree))) + "\n"


def _solution_text(source_cell: str) -> str:
    return re.sub(r"[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", "", source_cell)


def with_solution_cells(release: nbformat.NotebookNode, by_solution: dict[str, Any],
                        body: Any) -> nbformat.NotebookNode:
    """A copy of ``release`` whose solution cells are ``body(exercise)`` (left as released where
    it returns None); ``by_solution`` maps a solution cell's grade_id to its exercise spec."""
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade") and meta.get("grade_id") in by_solution:
            new = body(by_solution[meta["grade_id"]])
            if new is not None:
                cell.source = new
    return nb


def solved_release(release: nbformat.NotebookNode,
                   source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``release`` with every solution cell taken from ``source`` (markers removed):
    what a student who solved every exercise submits."""
    by_gid = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in source.cells}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            cell.source = _solution_text(by_gid[meta["grade_id"]].source)
    return nb


def _dump(nb) -> bytes:
    return (json.dumps(nb, indent=1, sort_keys=True) + "\n").encode()


def build_suite(chapter: Chapter, spec: ChapterSpec, *, secret_paths: list[str], port: int,
                other_chapter_nb: bytes | None = None) -> list[Submission]:
    release = nbformat.read(chapter.release, as_version=4)
    source = nbformat.read(chapter.source, as_version=4)
    src_by_gid = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in source.cells}
    exs = spec.exercises
    a = exs[0]
    full = {e.exercise_id: e.points for e in exs}
    zero = {e.exercise_id: 0.0 for e in exs}
    a_zero = {**full, a.exercise_id: 0.0}

    def solved(which=None):
        nb = copy.deepcopy(release)
        for c in nb.cells:
            gid = c.metadata.get("nbgrader", {}).get("grade_id")
            if gid in spec.by_solution_grade_id() and (which is None or gid in which):
                c.source = _solution_text(src_by_gid[gid].source)
        return nb

    def cell_index(nb, gid):
        return next(i for i, c in enumerate(nb.cells)
                    if c.metadata.get("nbgrader", {}).get("grade_id") == gid)

    def replace_a(body: str, prelude: str = "", after: str = ""):
        """Solution notebook whose exercise-a cell defines a's function with ``body``."""
        nb = solved()
        i = cell_index(nb, a.solution_grade_id)
        code = prelude + f"def {a.function}(*args, **kwargs):\n" + "".join(
            f"    {line}\n" for line in body.strip("\n").split("\n")) + after
        nb.cells[i].source = code
        return nb

    subs: list[Submission] = []

    def add(name, nb, exp, why, fname=None, **kw):
        subs.append(Submission(
            name, fname or f"{chapter.stem}.ipynb", nb if isinstance(nb, bytes) else _dump(nb),
            exp, why, **kw))

    add("solution", solved(), full, "the instructor's solutions earn full marks")
    add("blank", release, zero, "the blank release earns nothing")
    add("partial", solved({a.solution_grade_id}), {**zero, a.exercise_id: a.points},
        "only the first exercise is solved: exactly its points")
    ref = ('from course_lib import grading\n'
           f'return grading.get_exercise("{a.exercise_id}").reference(*args, **kwargs)')
    add("calls-reference", replace_a(ref), a_zero,
        "calls course_lib's reference: the guard fails it")
    add("reference-guard-off", replace_a(
        "import sys, threading\nsys.setprofile(None)\nthreading.setprofile(None)\n" + ref),
        a_zero, "switches the profiler guard off first: the sandbox's reference has no body")
    add("infinite-loop", replace_a("while True:\n    pass"), a_zero,
        "never returns: the cell times out, the kernel restarts, the rest is graded")
    add("os-exit", replace_a("import os\nos._exit(0)"), a_zero,
        "kills its own kernel: that exercise only")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += "\nimport ctypes\nctypes.string_at(0)\n"
    add("segfault", nb, a_zero,
        "a correct def, then a segfault in the same cell: the kernel dies, the def is lost")
    add("memory-bomb", replace_a("blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 26))"),
        a_zero, "allocates until the address-space limit: MemoryError, that exercise only")
    add("fork-bomb", replace_a("import os\nwhile True:\n    try:\n        os.fork()\n"
                               "    except OSError:\n        pass"), a_zero,
        "forks until the task limit, then spins: time-out, that exercise only")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += (
        "\nimport subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; "
        f"time.sleep(600)', '{MARKER}'], start_new_session=True)\n")
    add("detached-child", nb, full, "a detached child survives its cell but not the sandbox")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += (
        "\nprint('x' * 100_000_000)\nimport os\nos.write(1, b'y' * 10_000_000)\n")
    add("huge-output", nb, full, "100 MB of printed output is capped, the solution still counts")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += "\nimport sys\nsys.exit(0)\n"
    add("sys-exit", nb, full,
        "sys.exit() after the def: SystemExit is a cell error, the def stands")
    nb = replace_a("return None")
    nb.cells[cell_index(nb, a.test_grade_id)].source = "print('all tests passed')"
    add("edited-tests", nb, a_zero,
        "a wrong solution with its test cell gutted: the source's tests run")
    nb = solved()
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    add("deleted-tests", nb, full, "test cells deleted: the source's tests run anyway")
    nb = solved()
    i = cell_index(nb, a.solution_grade_id)
    stub = copy.deepcopy(release.cells[cell_index(release, a.solution_grade_id)])
    stub["id"] = "copied-cell"
    nb.cells.insert(i, stub)
    add("duplicate-grade-id", nb, full,
        "a copied solution cell (same grade_id, blank first, solved second): both run in order")
    nb = solved()
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade"):
            c.cell_type = "markdown"
            c.pop("outputs", None)
            c.pop("execution_count", None)
    c = nb.cells[cell_index(nb, a.solution_grade_id)]
    c.cell_type = "raw"
    c.pop("outputs", None)
    c.pop("execution_count", None)
    add("changed-cell-types", nb, a_zero,
        "test cells turned to markdown (source tests run) and a's solution turned to raw "
        "(not code)")
    nb = solved()
    for c in nb.cells:
        c.metadata = {}
        c.pop("id", None)
    nb.nbformat_minor = 4
    add("stripped-metadata", nb, full,
        "all cell metadata and ids removed: solutions found by def line")
    add("colab", colab_transform(_dump(solved()), f"{chapter.stem}.ipynb"), full,
        "saved from Colab", fname=f"Copy of {chapter.stem}.ipynb")
    add("colab-blank", colab_transform(_dump(release), f"{chapter.stem}.ipynb"), zero,
        "the blank release saved from Colab", fname=f"{chapter.stem} (1).ipynb")
    add("malformed-json", _dump(solved())[:-200], zero, "truncated JSON: could not grade",
        invalid=True)
    v3 = nbformat.convert(solved(), 3)
    add("nbformat-3", (nbformat.writes(v3, version=3)).encode(), full,
        "nbformat 3: upgraded, then graded")
    add("empty-file", b"", zero, "an empty file: could not grade", invalid=True)
    add("other-chapter", other_chapter_nb or _other_chapter(), zero,
        "another chapter's notebook: no solution of this chapter")
    paths = json.dumps(secret_paths)
    add("reads-secrets", replace_a(
        "import glob, os, json, re\n"
        f"for p in {paths} + glob.glob('/work/**/*.ipynb', recursive=True):\n"
        "    try:\n"
        "        text = open(p, encoding='utf-8', errors='ignore').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if 'BEGIN SOLUTION' in text:\n"
        "        for cell in json.loads(text)['cells']:\n"
        "            src = ''.join(cell['source'])\n"
        f"            if 'def {a.function}(' in src and 'BEGIN SOLUTION' in src:\n"
        "                ns = {}\n"
        "                exec('import torch, math\\nimport torch.nn.functional as F\\n' "
        "+ src, ns)\n"
        f"                return ns['{a.function}'](*args, **kwargs)\n"
        "return None"), a_zero,
        "looks for the source notebook, other submissions and the gradebook: none are there")
    add("writes-gradebook", replace_a(
        "import sqlite3\n"
        f"for p in {paths}:\n"
        "    if p.endswith('.db'):\n"
        "        try:\n"
        "            db = sqlite3.connect(p)\n"
        "            db.execute('update grade set auto_score = 1000')\n"
        "            db.commit()\n"
        "        except Exception:\n"
        "            pass\n"
        "return None"), a_zero, "tries to write the gradebook: it is not in the sandbox")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += (
        "\nimport socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
        "except OSError as err:\n    print('no network:', err)\n")
    add("network", nb, full, "opens a socket to the host: no network; the solution still counts")
    add("patched-testing", replace_a(
        "return None",
        prelude=("import numpy.testing, torch.testing\n"
                 "numpy.testing.assert_allclose = lambda *a, **k: None\n"
                 "torch.testing.assert_close = lambda *a, **k: None\n"
                 "from course_lib import grading\n"
                 "grading.compare_plain = lambda *a, **k: None\n")), a_zero,
        "a wrong solution that patches numpy.testing/torch.testing/compare_plain: judged outside")
    add("eq-always-true", replace_a(
        "import torch\nclass Liar(torch.Tensor):\n    def __eq__(self, other):\n"
        "        return True\nreturn Liar()"),
        a_zero, "returns a tensor subclass whose __eq__ is always true")
    add("input-transformer", replace_a(
        "return None",
        prelude=("def _rewrite(lines):\n"
                 "    return ['pass\\n' if 'grading' in l or 'assert' in l else l for l in lines]\n"
                 "get_ipython().input_transformers_post.append(_rewrite)\n")), a_zero,
        "a wrong solution plus an input transformer that blanks test cells")
    nb = solved()
    i = cell_index(nb, a.solution_grade_id)
    original = _solution_text(src_by_gid[a.solution_grade_id].source)
    helper_src = original.replace(f"def {a.function}(", f"def _my_{a.function}(", 1)
    helper = nbformat.v4.new_code_cell("import math\nimport torch\n" + helper_src
                                       + "\nmodel = undefined_training_function(1000)\n")
    helper.outputs = [nbformat.v4.new_output("stream", name="stdout", text="trained\n")]
    helper.execution_count = 3
    nb.cells.insert(i, helper)
    nb.cells[i + 1].source = (f"def {a.function}(*args, **kwargs):\n"
                              f"    return _my_{a.function}(*args, **kwargs)\n")
    nb.cells[i + 1].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "42"},
                                                      execution_count=4)]
    add("helper-cells", nb, full,
        "a correct solution through a helper in its own cell (with outputs and a demo line)")
    # Second round (issue 11): nothing one file causes stops the batch, no link leads outside.
    deep = b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b', "nbformat": 4}'
    add("deep-json", deep, zero, "valid JSON nested 100,000 levels: could not grade, nobody "
        "else affected", invalid=True)
    add("symlink-to-solution", b"", zero, "a symbolic link named like the notebook, pointing at "
        "the instructor's source: never followed", invalid=True,
        extra={"symlink": str(chapter.source)})
    add("linked-folder", b"", {}, "the student's folder is a symbolic link to the instructor's "
        "source folder: not entered, reported, no grade", invalid=True, in_grades=False,
        extra={"folder_symlink": str(chapter.source.parent)})
    add("named-pipe", b"", zero, "a named pipe named like the notebook: never opened for a "
        "blocking read", invalid=True, extra={"fifo": True})
    nb = solved()
    bad = nbformat.v4.new_markdown_cell("placeholder")
    nb.cells.insert(1, bad)
    raw = json.loads(_dump(nb))
    raw["cells"][1]["source"] = {"a": 1}
    add("malformed-cell", (json.dumps(raw, indent=1) + "\n").encode(), zero,
        "a markdown cell whose source is a JSON object: invalid nbformat, cell 2 named",
        invalid=True)
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += "\nx = 1" + "+1" * 200_000 + "\n"
    add("deep-expression", nb, a_zero,
        "a cell too deeply nested to compile (also for the grader's parser): that exercise only")
    nb = solved()
    nb.cells[cell_index(nb, a.solution_grade_id)].source += (
        "\nprint('\\ud800 \\x00 </pre><script>alert(1)</script>')\n")
    add("odd-output", nb, full, "prints a lone surrogate, a NUL and HTML: the feedback is still "
        "written, escaped")
    nb = solved()
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in spec.by_solution_grade_id():
            c.source = renamed_copy(c.source)
    add("renamed-copy", nb, full, "the solutions with every local name renamed and comments "
        "dropped: full marks (the similarity report flags it; grades never change)")
    return subs


def _other_chapter() -> bytes:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("def unrelated(x):\n    return x\n")
    cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False,
                                 "grade_id": "unrelated", "schema_version": 3}
    nb.cells = [nbformat.v4.new_markdown_cell("# 9. Another chapter"), cell]
    return _dump(nb)


def write_suite(subs: list[Submission], root: Path) -> None:
    for s in subs:
        folder = root / s.student
        if "folder_symlink" in s.extra:
            root.mkdir(parents=True, exist_ok=True)
            os.symlink(s.extra["folder_symlink"], folder, target_is_directory=True)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        if "symlink" in s.extra:
            os.symlink(s.extra["symlink"], folder / s.filename)
        elif s.extra.get("fifo"):
            os.mkfifo(folder / s.filename)
        else:
            (folder / s.filename).write_bytes(s.content)


def load(chapter: Chapter) -> ChapterSpec:
    """The chapter's spec as the grader reads it, from its source and release."""
    return load_chapter_spec(chapter.slug, chapter.exercises, chapter.source, chapter.release)
