"""The sandbox's copy of course_lib, with the bodies of this chapter's reference solutions removed.

The reference guard of :mod:`course_lib.grading` (a profiler hook) fails a case whose student
code calls a reference. Student code can switch the hook off (``sys.setprofile(None)``), so the
sandbox does not get the references at all: every function named as an exercise's ``reference``
or in its ``forbidden`` tuple (and every method of a forbidden class) has its body replaced by a
``raise`` in the copy of course_lib mounted in the sandbox. The docstring and signature stay, so
the rest of course_lib imports and works. The trusted judge uses the real course_lib.
"""

from __future__ import annotations

import ast
import inspect
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

import course_lib
from course_lib import grading

MESSAGE = ("course_lib's implementation of {name} " + grading.STRIPPED_MARKER
           + ": solve the exercise with your own code")


def _codes(obj: Any) -> set[Any]:
    # The guard's own walker: what the profiler watches is exactly what is stripped here.
    return set(grading.code_objects(obj))


def needed_by_cases(exercises: Iterable[Any], references: Iterable[Any]) -> list[Any]:
    """The references that the hidden cases' input builders call themselves.

    Those cannot lose their bodies in the sandbox (the sandbox builds the inputs); they stay
    protected by course_lib's profiler guard only.
    """
    called: set[Any] = set()

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            called.add(frame.f_code)

    previous = sys.getprofile()
    sys.setprofile(profiler)
    try:
        for ex in exercises:
            for case in ex.cases():
                case.inputs()
    finally:
        sys.setprofile(previous)
    return [obj for obj in references if _codes(obj) & called]


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


def build_sandbox_course_lib(dest: Path, references: Iterable[Callable[..., Any]],
                             extra_exercise_files: Iterable[Path] = ()) -> list[str]:
    """Copy course_lib to ``dest/course_lib`` with ``references`` stripped; return what was stripped.

    Args:
        dest: the folder that goes on the sandbox's PYTHONPATH.
        references: the chapter's reference implementations and forbidden objects.
        extra_exercise_files: test-only exercise modules, copied into ``course_lib/exercises``.
    """
    src_root = Path(course_lib.__file__).resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)  # the sandbox's unprivileged uid reads it
    target = dest / "course_lib"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src_root, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    extra_map: dict[Path, Path] = {}
    for f in extra_exercise_files:
        shutil.copyfile(f, target / "exercises" / f.name)
        extra_map[Path(f).resolve()] = target / "exercises" / f.name
    stripped: list[str] = []
    for path, names in _targets(references).items():
        if path in extra_map:
            out = extra_map[path]
        else:
            try:
                out = target / path.relative_to(src_root)
            except ValueError:
                continue  # not part of course_lib (e.g. torch itself): nothing to hide
        text, done = strip_source(path.read_text(encoding="utf-8"), names)
        out.write_text(text, encoding="utf-8")
        stripped += [f"{out.relative_to(dest)}:{q}" for q in done]
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return sorted(stripped)
