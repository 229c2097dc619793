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

from autograder.chapter_spec import ChapterSpec, ExerciseSpec, defined_names, normalise_source


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


def plan_submission(spec: ChapterSpec, nb: nbformat.NotebookNode) -> Plan:
    """Match the student's cells to the chapter's exercises (see the module docstring)."""
    by_sol = spec.by_solution_grade_id()
    by_test = spec.by_test_grade_id()
    by_function = {ex.function: ex for ex in spec.exercises}
    sol_cell_ids = {ex.solution_cell_id: ex for ex in spec.exercises if ex.solution_cell_id}
    test_cell_ids = {ex.test_cell_id: ex for ex in spec.exercises if ex.test_cell_id}
    release_tests = {ex.release_test: ex for ex in spec.exercises if ex.release_test}
    visible_tests = {normalise_source(ex.visible_test): ex for ex in spec.exercises}
    plan = Plan(groups={ex.exercise_id: [] for ex in spec.exercises},
                order=[], exercise_notes={ex.exercise_id: [] for ex in spec.exercises})
    anchors: dict[str, float] = {}
    cells: list[tuple[StudentCell, ExerciseSpec | None]] = []
    seen_grade_ids: dict[str, int] = {}
    foreign_ids = 0

    def note(ex: ExerciseSpec, text: str) -> None:
        if text not in plan.exercise_notes[ex.exercise_id]:
            plan.exercise_notes[ex.exercise_id].append(text)

    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
        gid = meta.get("grade_id")
        cid = cell.get("id")
        text = normalise_source(cell.get("source", ""))
        if gid and gid not in by_sol and gid not in by_test and (meta.get("solution")
                                                                 or meta.get("grade")):
            foreign_ids += 1
        if cell.get("cell_type") != "code":
            ex = by_sol.get(gid) if gid else sol_cell_ids.get(cid)
            if ex is not None and text != ex.release_stub:
                note(ex, f"the solution cell (cell {i + 1}) is a {cell.get('cell_type')} cell, "
                         "not a code cell, so its text was not run")
            continue
        ex = by_test.get(gid) or test_cell_ids.get(cid) or release_tests.get(text) \
            or visible_tests.get(text)
        if ex is not None and gid not in by_sol:
            anchors.setdefault(ex.exercise_id, i)
            if text not in (ex.release_test, normalise_source(ex.visible_test)):
                note(ex, "your copy of the test cell was edited; the course's own tests ran "
                         "instead")
            continue
        ex = None
        how = ""
        if gid in by_sol:
            ex, how = by_sol[gid], "grade_id"
            seen_grade_ids[gid] = seen_grade_ids.get(gid, 0) + 1
        elif cid and cid in sol_cell_ids:
            ex, how = sol_cell_ids[cid], "cell id"
        else:
            names = defined_names(cell.get("source", ""))
            hits = [by_function[n] for n in names if n in by_function]
            if hits:
                ex, how = hits[0], "def line"
        if ex is not None:
            cells.append((StudentCell(i, cell.get("source", ""), "solution", how), ex))
            continue
        if text in spec.release_texts:
            continue  # a released demo or setup cell, left as it was: not re-run
        kept = helper_statements(_strip_magics(cell.get("source", "")))
        if kept.strip():
            cells.append((StudentCell(i, kept, "helper"), None))

    if foreign_ids and not any(c.role == "solution" and c.how == "grade_id" for c, _ in cells):
        plan.notes.append(f"this notebook holds {foreign_ids} graded cells of another notebook "
                          f"and none of {spec.name}: is it the right chapter?")
    for gid, count in seen_grade_ids.items():
        if count > 1:
            note(by_sol[gid], f"{count} cells carry the solution id {gid!r} (a copied cell); "
                              "they all ran, in notebook order, so the last definition counts")
    for cell, ex in cells:
        if ex is None:
            continue
        if cell.how == "def line":
            note(ex, f"solution found by its `def {ex.function}(` line in cell {cell.index + 1} "
                     "(its nbgrader metadata was missing)")
        elif cell.how == "cell id":
            note(ex, f"solution cell {cell.index + 1} found by its cell id (its nbgrader "
                     "metadata was missing)")
    # Anchor each exercise: its test cell's position, else just after its last solution cell.
    for ex in spec.exercises:
        sols = [c.index for c, e in cells if e is ex]
        if not sols:
            plan.missing[ex.exercise_id] = (f"no solution cell for {ex.function!r} was found "
                                            "(no cell with its grade_id, cell id or "
                                            f"`def {ex.function}(` line)")
            continue
        if ex.exercise_id not in anchors or anchors[ex.exercise_id] < max(sols):
            anchors[ex.exercise_id] = max(sols) + 0.5
    plan.order = [ex.exercise_id for ex in sorted(
        (e for e in spec.exercises if e.exercise_id not in plan.missing),
        key=lambda e: anchors[e.exercise_id])]
    for cell, ex in cells:
        if ex is not None:
            if ex.exercise_id not in plan.missing:
                plan.groups[ex.exercise_id].append(cell)
            continue
        target = next((eid for eid in plan.order if anchors[eid] > cell.index),
                      plan.order[-1] if plan.order else None)
        if target is not None:
            plan.groups[target].append(cell)
            ex_t = next(e for e in spec.exercises if e.exercise_id == target)
            note(ex_t, f"your helper cell {cell.index + 1} ran before this exercise's tests "
                       "(its imports, definitions and constants only)")
    for eid in plan.groups:
        plan.groups[eid].sort(key=lambda c: c.index)
    return plan
