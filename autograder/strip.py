"""The sandbox's copy of course_lib: no exercise module, and no body of any answer.

Student code in the sandbox must find nothing that computes an exercise's answer, of any chapter:

* **No exercise module.** ``course_lib/exercises/`` keeps only ``__init__.py``, ``_common.py``
  and ``_calls.py`` (seeded helpers and call adapters): the references, slips, diagnoses and case
  builders of every chapter stay on the trusted side, which builds the hidden inputs and hands
  them to the sandbox (:func:`course_lib.grading.write_case_inputs`).
* **No answer's body.** Every function named as an exercise's ``reference`` or in its
  ``forbidden`` tuple, in every chapter (and every method of such a class), has its body replaced
  by a ``raise`` in the copy, unless the chapter being graded allows it (``Exercise.allowed``).
  The docstring and signature stay, so the rest of course_lib imports and works.

The reference guard of :mod:`course_lib.grading` (a profiler hook) could be switched off by
student code (``sys.setprofile(None)``); the stripped copy cannot. The trusted judge uses the
real course_lib.
"""

from __future__ import annotations

import ast
import inspect
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import course_lib
from course_lib import grading

MESSAGE = ("course_lib's implementation of {name} " + grading.STRIPPED_MARKER
           + ": solve the exercise with your own code")


def _codes(obj: Any) -> set[Any]:
    # The guard's own walker: what the profiler watches is exactly what is stripped here.
    return set(grading.code_objects(obj))


def _targets(objs: Iterable[Any]) -> dict[Path, set[str]]:
    """Source files and qualified names of the functions/classes to strip."""
    out: dict[Path, set[str]] = {}
    for obj in objs:
        obj = inspect.unwrap(obj) if callable(obj) else obj
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            obj = type(obj) if hasattr(obj, "forward") else None
        if obj is None:
            continue
        try:
            path = Path(inspect.getsourcefile(obj) or "")
        except TypeError:
            continue
        if "<locals>" in obj.__qualname__ or not path.is_file():
            continue
        out.setdefault(path.resolve(), set()).add(obj.__qualname__)
    return out


class _Stripper(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names
        self.stack: list[str] = []
        self.stripped: list[str] = []

    def _body(self, node: ast.AST, qual: str) -> list[ast.stmt]:
        body = []
        doc = ast.get_docstring(node, clean=False)
        if doc is not None:
            body.append(ast.Expr(ast.Constant(doc)))
        body.append(ast.parse(f"raise RuntimeError({MESSAGE.format(name=qual)!r})").body[0])
        return body

    def _visit_def(self, node: Any) -> Any:
        qual = ".".join(self.stack + [node.name])
        inside_stripped_class = any(".".join(self.stack[:k + 1]) in self.names
                                    for k in range(len(self.stack)))
        if qual in self.names or inside_stripped_class:
            node.body = self._body(node, qual)
            self.stripped.append(qual)
            return node
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()
        return node

    visit_FunctionDef = _visit_def
    visit_AsyncFunctionDef = _visit_def

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()
        return node


def strip_source(source: str, names: set[str]) -> tuple[str, list[str]]:
    """``source`` with the bodies of the functions (and classes' methods) in ``names`` removed."""
    tree = ast.parse(source)
    stripper = _Stripper(names)
    tree = stripper.visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", stripper.stripped


#: What the sandbox's ``course_lib/exercises/`` keeps: no chapter's exercise module.
SANDBOX_EXERCISE_FILES = ("__init__.py", "_common.py", "_calls.py")


def answers_to_strip(chapter: str) -> list[Any]:
    """Every chapter's references and forbidden objects, less what ``chapter``'s exercises allow.

    Example:
        >>> from course_lib import attention
        >>> attention.scaled_dot_product_attention in answers_to_strip("seq2seq")
        True
    """
    exercises = grading.chapter_exercises(chapter).values()
    allowed = {code for ex in exercises for obj in ex.allowed for code in _codes(obj)}
    order = [chapter] + [c for c in grading.exercise_chapters() if c != chapter]
    out: list[Any] = []
    for obj, _ in grading.answer_objects(order):
        if not (_codes(obj) & allowed) and not any(obj is o for o in out):
            out.append(obj)
    return out


def build_sandbox_course_lib(dest: Path, references: Iterable[Callable[..., Any]]) -> list[str]:
    """Copy course_lib to ``dest/course_lib`` without exercise modules and with ``references``
    stripped; return what was stripped.

    Args:
        dest: the folder that goes on the sandbox's PYTHONPATH.
        references: the objects whose bodies go (see :func:`answers_to_strip`).
    """
    src_root = Path(course_lib.__file__).resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)  # the sandbox's unprivileged uid reads it
    target = dest / "course_lib"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src_root, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in (target / "exercises").iterdir():
        if path.name not in SANDBOX_EXERCISE_FILES:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    stripped: list[str] = []
    for path, names in _targets(references).items():
        try:
            out = target / path.relative_to(src_root)
        except ValueError:
            continue  # not part of course_lib (torch itself, a test's own chapter): not copied
        if not out.exists():
            continue  # an exercise module: not in the sandbox at all
        text, done = strip_source(path.read_text(encoding="utf-8"), names)
        out.write_text(text, encoding="utf-8")
        stripped += [f"{out.relative_to(dest)}:{q}" for q in done]
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return sorted(stripped)
