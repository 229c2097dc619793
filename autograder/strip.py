"""The sandbox's copy of course_lib: an allow-list, no exercise module, and no body of any answer.

Student code in the sandbox must find nothing that computes an exercise's answer, of any chapter:

* **An allow-list, not a deny-list.** The copy holds the grading plumbing
  (:data:`SANDBOX_BASE`: ``course_lib.grading``, ``course_lib.utils`` for the setup cell, the
  exercises' seeded helpers and call adapters) and only the modules a chapter needs there
  (:func:`sandbox_modules`): what its exercise module declares in ``SANDBOX_MODULES`` and the
  modules of objects in its hidden inputs. ``course_lib.llama``, ``course_lib.longrange`` and every
  other module that could re-derive an answer without being a named reference are simply absent.
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
#: The course_lib every sandbox holds (files and packages, relative to course_lib/): the grading
#: plumbing, the setup cell's ``get_device``/``seed_everything`` and the exercises' seeded helpers
#: and call adapters. Nothing else, unless a chapter needs it (:func:`sandbox_modules`).
SANDBOX_BASE = ("__init__.py", "utils.py", "grading",
                *(f"exercises/{name}" for name in SANDBOX_EXERCISE_FILES))


def _module_file(src_root: Path, dotted: str) -> Path | None:
    """``course_lib.a.b`` -> its file under ``src_root`` (a module or a package's __init__)."""
    parts = dotted.split(".")[1:]
    if not parts:
        return src_root / "__init__.py"
    for cand in (src_root.joinpath(*parts).with_suffix(".py"),
                 src_root.joinpath(*parts) / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _course_imports(path: Path) -> set[str]:
    """The course_lib modules a file imports (any level, relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("course_lib."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if node.level:
                continue  # course_lib uses absolute imports only
            if mod == "course_lib":
                found.update(f"course_lib.{a.name}" for a in node.names)
            elif mod.startswith("course_lib."):
                found.add(mod)
                found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def sandbox_modules(chapter: str, inputs: Iterable[Any] = ()) -> list[str]:
    """The course_lib modules beyond :data:`SANDBOX_BASE` that the sandbox of ``chapter`` holds:
    those the chapter's exercise module declares (``SANDBOX_MODULES``: what its statements name
    as usable or its visible tests import), those whose objects are in the hidden inputs (a step
    function such as ``decoding.MarkovStep`` is unpickled there), and every course_lib module
    they import. References and forbidden objects in them are stripped all the same.

    Example:
        >>> sandbox_modules("modern_decoder")
        []
        >>> from course_lib.decoding import MarkovStep
        >>> import torch
        >>> "course_lib.decoding" in sandbox_modules("seq2seq", [MarkovStep(torch.zeros(2, 2))])
        True
    """
    import importlib

    src_root = Path(course_lib.__file__).resolve().parent
    wanted = set(getattr(importlib.import_module(f"course_lib.exercises.{chapter}"),
                         "SANDBOX_MODULES", ()))
    wanted |= {m for m in (_object_modules(v) for v in inputs) for m in m}
    out: set[str] = set()
    todo = sorted(wanted)
    while todo:
        mod = todo.pop()
        path = _module_file(src_root, mod)
        if path is None or mod in out:
            continue
        rel = path.relative_to(src_root).as_posix()
        if rel in SANDBOX_BASE or rel.startswith(("grading/", "exercises/")):
            continue
        out.add(mod)
        todo += sorted(_course_imports(path))
    return sorted(out)


def _object_modules(value: Any, depth: int = 0) -> set[str]:
    """The course_lib modules of the objects inside a case's inputs (containers walked)."""
    import torch

    if depth > 8 or isinstance(value, (torch.Tensor, str, bytes, int, float, bool, type(None))):
        return set()
    found = set()
    module = type(value).__module__
    if module.startswith("course_lib."):
        found.add(module)
    if isinstance(value, dict):
        items: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    elif isinstance(value, torch.nn.Module):
        items = list(value.children())
    else:
        items = list(getattr(value, "__dict__", {}).values())
    for item in items:
        found |= _object_modules(item, depth + 1)
    return found


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


def build_sandbox_course_lib(dest: Path, references: Iterable[Callable[..., Any]],
                             modules: Iterable[str] = ()) -> list[str]:
    """Write the sandbox's course_lib to ``dest/course_lib`` from the allow-list
    (:data:`SANDBOX_BASE` plus ``modules``), with ``references`` stripped; return what was
    stripped.

    Args:
        dest: the folder that goes on the sandbox's PYTHONPATH.
        references: the objects whose bodies go (see :func:`answers_to_strip`).
        modules: dotted course_lib modules the chapter's sandbox also holds
            (:func:`sandbox_modules`).
    """
    src_root = Path(course_lib.__file__).resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)  # the sandbox's unprivileged uid reads it
    target = dest / "course_lib"
    if target.exists():
        shutil.rmtree(target)
    keep = list(SANDBOX_BASE)
    for mod in modules:
        path = _module_file(src_root, mod)
        if path is None:
            raise ValueError(f"the sandbox should hold {mod}, which course_lib does not have")
        keep.append(path.relative_to(src_root).as_posix())
    for rel in keep:
        src = src_root / rel
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, out, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(src, out)
    for folder in [p for p in target.rglob("*") if p.is_dir()]:
        if not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("", encoding="utf-8")  # a package on the way
    stripped: list[str] = []
    for path, names in _targets(references).items():
        try:
            out = target / path.relative_to(src_root)
        except ValueError:
            continue  # not part of course_lib (torch itself, a test's own chapter): not copied
        if not out.exists():
            continue  # not in the sandbox at all
        text, done = strip_source(path.read_text(encoding="utf-8"), names)
        out.write_text(text, encoding="utf-8")
        stripped += [f"{out.relative_to(dest)}:{q}" for q in done]
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return sorted(stripped)
