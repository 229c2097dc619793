"""Rebuild the notebook to grade from the instructor's source and the student's solution cells.

What runs for a submission is never the submitted notebook as it is:

1. the source's setup cell(s);
2. for each exercise, in the order of the student's notebook: the student's solution cell(s),
   found by nbgrader ``grade_id``, else by the released cell id, else by the ``def name(`` line
   (Colab and some editors drop metadata and ids), plus the student's own helper cells (their
   ``def``/``class``/``import`` statements and constant assignments only, so that a correct
   solution with helpers earns its marks and no training demo re-runs);
3. the source's test cell of that exercise: the visible part and the hidden part, never the
   student's copy of it.

Cells left as released (demos, markdown) are not run. Every repair is written down in
:attr:`Plan.notes` and shown in the feedback.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import nbformat

from autograder.chapter_spec import (
    ChapterSpec,
    ExerciseSpec,
    defined_names,
    normalise_source,
)


@dataclass
class StudentCell:
    """A cell of the student's notebook that will run: its (possibly filtered) code and role."""

    index: int  # position in the submitted notebook
    source: str
    role: str  # "solution" or "helper"
    how: str = ""  # how a solution cell was matched: "grade_id", "cell id", "def line"


@dataclass
class Plan:
    """What to run for one submission, and what was repaired on the way."""

    groups: dict[str, list[StudentCell]]  # exercise id -> cells, in notebook order
    order: list[str]  # exercise ids in the order to run them
    notes: list[str] = field(default_factory=list)  # for the whole submission
    exercise_notes: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # exercise id -> why nothing to run


_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _constant_expr(node: ast.AST) -> bool:
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp,
                              ast.BinOp, ast.operator, ast.unaryop, ast.Load, ast.Name,
                              ast.Attribute))
               for n in ast.walk(node))


def helper_statements(source: str) -> str:
    """The part of a student-added cell that is kept: imports, defs, classes, constants.

    Example:
        >>> helper_statements("import math\\nmodel = train(100)\\ndef f(x):\\n    return x")
        'import math\\ndef f(x):\\n    return x'
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    kept = []
    lines = source.split("\n")
    for node in tree.body:
        keep = isinstance(node, _KEEP) or (
            isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
            and _constant_expr(node.value))
        if keep:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return "\n".join(kept)


def _strip_magics(source: str) -> str:
    """Drop IPython line magics and shell escapes (``%pip``, ``!ls``) from a helper cell."""
    return "\n".join(line for line in source.split("\n")
                     if not line.lstrip().startswith(("%", "!")))


class _Index:
    """The chapter's exercises looked up every way a student's cell may name them."""

    def __init__(self, spec: ChapterSpec) -> None:
        self.spec = spec
        # keyed by what a cell may carry: a grade id or cell id, or None when it has none
        self.by_sol: dict[str | None, ExerciseSpec] = {
            ex.solution_grade_id: ex for ex in spec.exercises}
        self.by_test: dict[str | None, ExerciseSpec] = {
            ex.test_grade_id: ex for ex in spec.exercises}
        self.by_function = {ex.function: ex for ex in spec.exercises}
        self.sol_cell_ids: dict[str | None, ExerciseSpec] = {
            ex.solution_cell_id: ex for ex in spec.exercises if ex.solution_cell_id}
        self.test_cell_ids: dict[str | None, ExerciseSpec] = {
            ex.test_cell_id: ex for ex in spec.exercises if ex.test_cell_id}
        self.release_tests = {ex.release_test: ex for ex in spec.exercises if ex.release_test}
        self.visible_tests = {normalise_source(ex.visible_test): ex for ex in spec.exercises}

    def test_of(self, gid: str | None, cid: str | None, text: str) -> ExerciseSpec | None:
        """The exercise whose test cell this is (by grade id, cell id or its text)."""
        return self.by_test.get(gid) or self.test_cell_ids.get(cid) \
            or self.release_tests.get(text) or self.visible_tests.get(text)

    def solution_of(self, gid: str | None, cid: str | None,
                    source: str) -> tuple[ExerciseSpec | None, str]:
        """The exercise whose solution this cell holds and how it was matched (``""``: none)."""
        if gid in self.by_sol:
            return self.by_sol[gid], "grade_id"
        if cid and cid in self.sol_cell_ids:
            return self.sol_cell_ids[cid], "cell id"
        hits = [self.by_function[n] for n in defined_names(source) if n in self.by_function]
        return (hits[0], "def line") if hits else (None, "")


@dataclass
class _Scan:
    """What a pass over the student's cells found."""

    plan: Plan
    cells: list[tuple[StudentCell, ExerciseSpec | None]] = field(default_factory=list)
    anchors: dict[str, float] = field(default_factory=dict)
    seen_grade_ids: dict[str | None, int] = field(default_factory=dict)
    foreign_ids: int = 0

    def note(self, ex: ExerciseSpec, text: str) -> None:
        """Add ``text`` to the exercise's notes, once."""
        if text not in self.plan.exercise_notes[ex.exercise_id]:
            self.plan.exercise_notes[ex.exercise_id].append(text)


def _scan_cell(scan: _Scan, index: _Index, i: int, cell: dict) -> None:
    """Classify the student's cell ``i``: a test cell (an anchor), a solution, a helper, or a
    cell left as released."""
    meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
    gid, cid = meta.get("grade_id"), cell.get("id")
    text = normalise_source(cell.get("source", ""))
    if gid and gid not in index.by_sol and gid not in index.by_test and (meta.get("solution")
                                                                         or meta.get("grade")):
        scan.foreign_ids += 1
    if cell.get("cell_type") != "code":
        ex = index.by_sol.get(gid) if gid else index.sol_cell_ids.get(cid)
        if ex is not None and text != ex.release_stub:
            scan.note(ex, f"the solution cell (cell {i + 1}) is a {cell.get('cell_type')} cell, "
                          "not a code cell, so its text was not run")
        return
    ex = index.test_of(gid, cid, text)
    if ex is not None and gid not in index.by_sol:
        scan.anchors.setdefault(ex.exercise_id, i)
        if text not in (ex.release_test, normalise_source(ex.visible_test)):
            scan.note(ex, "your copy of the test cell was edited; the course's own tests ran "
                          "instead")
        return
    ex, how = index.solution_of(gid, cid, cell.get("source", ""))
    if how == "grade_id":
        scan.seen_grade_ids[gid] = scan.seen_grade_ids.get(gid, 0) + 1
    if ex is not None:
        scan.cells.append((StudentCell(i, cell.get("source", ""), "solution", how), ex))
    elif text not in index.spec.release_texts:  # a released demo or setup cell is not re-run
        kept = helper_statements(_strip_magics(cell.get("source", "")))
        if kept.strip():
            scan.cells.append((StudentCell(i, kept, "helper"), None))


def _note_repairs(scan: _Scan, index: _Index) -> None:
    """Notes on another chapter's notebook, copied solution cells and solutions found without
    their metadata."""
    if scan.foreign_ids and not any(c.role == "solution" and c.how == "grade_id"
                                    for c, _ in scan.cells):
        scan.plan.notes.append(f"this notebook holds {scan.foreign_ids} graded cells of another "
                               f"notebook and none of {index.spec.name}: is it the right chapter?")
    for gid, count in scan.seen_grade_ids.items():
        if count > 1:
            scan.note(index.by_sol[gid], f"{count} cells carry the solution id {gid!r} (a copied "
                      "cell); they all ran, in notebook order, so the last definition counts")
    for cell, ex in scan.cells:
        if ex is not None and cell.how == "def line":
            scan.note(ex, f"solution found by its `def {ex.function}(` line in cell "
                          f"{cell.index + 1} (its nbgrader metadata was missing)")
        elif ex is not None and cell.how == "cell id":
            scan.note(ex, f"solution cell {cell.index + 1} found by its cell id (its nbgrader "
                          "metadata was missing)")


def _order(scan: _Scan, spec: ChapterSpec) -> None:
    """Anchor each exercise (its test cell's position, else just after its last solution
    cell), name those without a solution, and order the others."""
    plan = scan.plan
    for ex in spec.exercises:
        sols = [c.index for c, e in scan.cells if e is ex]
        if not sols:
            plan.missing[ex.exercise_id] = (f"no solution cell for {ex.function!r} was found "
                                            "(no cell with its grade_id, cell id or "
                                            f"`def {ex.function}(` line)")
            continue
        if ex.exercise_id not in scan.anchors or scan.anchors[ex.exercise_id] < max(sols):
            scan.anchors[ex.exercise_id] = max(sols) + 0.5
    plan.order = [ex.exercise_id for ex in sorted(
        (e for e in spec.exercises if e.exercise_id not in plan.missing),
        key=lambda e: scan.anchors[e.exercise_id])]


def _group(scan: _Scan, spec: ChapterSpec) -> None:
    """Each solution cell to its exercise, each helper cell to the next exercise after it."""
    plan = scan.plan
    for cell, ex in scan.cells:
        if ex is not None:
            if ex.exercise_id not in plan.missing:
                plan.groups[ex.exercise_id].append(cell)
            continue
        target = next((eid for eid in plan.order if scan.anchors[eid] > cell.index),
                      plan.order[-1] if plan.order else None)
        if target is not None:
            plan.groups[target].append(cell)
            ex_t = next(e for e in spec.exercises if e.exercise_id == target)
            scan.note(ex_t, f"your helper cell {cell.index + 1} ran before this exercise's tests "
                            "(its imports, definitions and constants only)")
    for eid in plan.groups:
        plan.groups[eid].sort(key=lambda c: c.index)


def plan_submission(spec: ChapterSpec, nb: nbformat.NotebookNode) -> Plan:
    """Match the student's cells to the chapter's exercises (see the module docstring).

    Args:
        spec: the chapter's exercises, with their released stubs and tests.
        nb: the student's validated notebook.

    Returns:
        What to run per exercise, in order, and every repair made on the way.
    """
    plan = Plan(groups={ex.exercise_id: [] for ex in spec.exercises},
                order=[], exercise_notes={ex.exercise_id: [] for ex in spec.exercises})
    scan, index = _Scan(plan), _Index(spec)
    for i, cell in enumerate(nb.cells):
        _scan_cell(scan, index, i, cell)
    _note_repairs(scan, index)
    _order(scan, spec)
    _group(scan, spec)
    return plan
