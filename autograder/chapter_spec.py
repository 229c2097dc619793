"""What the grader needs to know about a chapter, read from the instructor's source notebook.

The source is the single authority: its setup cell(s) (tag ``setup``), each exercise's solution
cell (nbgrader ``solution``, ``grade_id``), test cell (nbgrader ``grade``, ``points``) and the
hidden call ``grading.check("<chapter>.<name>", <name>)`` inside ``### BEGIN/END HIDDEN TESTS``.
The release's non-graded cells are remembered too, so that cells a student left as released (demos)
are recognised and not re-executed.

A question's hidden call also gives its answer, ``grading.check("<chapter>.<name>", <name>,
answer="c")``: the answer lives in the source notebook only (course_lib does not ship it). The
spec keeps it for the trusted judge (:attr:`ChapterSpec.answers`), and the hidden test the
sandbox runs is the call without it, so no student code can read it.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from coursebook import notebooks

HIDDEN_RE = re.compile(r"### BEGIN HIDDEN TESTS\n?(.*?)### END HIDDEN TESTS\n?", re.S)
#: The hidden call: exercise id, function name and, for a question, its answer (one letter).
CHECK_RE = re.compile(r"""grading\.check\(\s*["']([\w.]+)["']\s*,\s*(\w+)\s*"""
                      r"""(?:,\s*answer\s*=\s*["']([a-z])["']\s*)?\)""")


def without_answer(hidden: str) -> str:
    """The hidden test as the sandbox runs it: each check call without its ``answer``.

    Example:
        >>> without_answer('grading.check("toy.q", q, answer="b")\\n')
        'grading.check("toy.q", q)\\n'
    """
    return CHECK_RE.sub(lambda m: f'grading.check("{m[1]}", {m[2]})', hidden)


def normalise_source(text: str) -> str:
    """Source text compared across notebooks: trailing spaces, CRLF and blank ends ignored."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip()


def defined_names(source: str) -> list[str]:
    """Top-level ``def``/``class`` names of a cell (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


@dataclass(frozen=True)
class ExerciseSpec:
    """One exercise of a chapter.

    Attributes:
        exercise_id: ``"seq2seq.additive_score"`` (the registry key).
        name: the column name in grades.csv: the part after the dot.
        function: the student's function name passed to ``grading.check``.
        solution_grade_id, test_grade_id: nbgrader ids of the solution and test cells.
        solution_cell_id, test_cell_id: notebook cell ids of those cells in the source/release.
        points: the test cell's points.
        visible_test: the test cell without its hidden part (students see it).
        hidden_test: the hidden part (never shown in feedback).
        release_stub: the released (blank) solution cell's text, normalised.
        release_test: the released test cell's text, normalised.
        answer: a question's answer, from its hidden call (``None`` for other exercises); the
            trusted judge's, never sent to the sandbox (``hidden_test`` is the call without it).
        solution_source: the source's solution cell (the instructor's solution), for the
            similarity report's reference fingerprint (compiled in the trusted process, never
            run, never sent to the sandbox).
    """

    exercise_id: str
    name: str
    function: str
    solution_grade_id: str
    test_grade_id: str
    solution_cell_id: str | None
    test_cell_id: str | None
    points: float
    visible_test: str
    hidden_test: str
    release_stub: str = ""
    release_test: str = ""
    answer: str | None = None
    solution_source: str = ""


@dataclass
class ChapterSpec:
    """A chapter as the grader sees it (see the module docstring)."""

    name: str
    exercise_chapter: str
    setup: list[str]
    exercises: list[ExerciseSpec]
    release_texts: set[str] = field(default_factory=set)
    release_ids: dict[str, str] = field(default_factory=dict)  # cell id -> role
    source_sha: str = ""

    @property
    def max_total(self) -> float:
        return float(sum(ex.points for ex in self.exercises))

    @property
    def answers(self) -> dict[str, str]:
        """``exercise id -> answer`` of the chapter's questions, for the trusted judge."""
        return {ex.exercise_id: ex.answer for ex in self.exercises if ex.answer is not None}

    def by_solution_grade_id(self) -> dict[str, ExerciseSpec]:
        return {ex.solution_grade_id: ex for ex in self.exercises}

    def by_test_grade_id(self) -> dict[str, ExerciseSpec]:
        return {ex.test_grade_id: ex for ex in self.exercises}


class SpecError(RuntimeError):
    """The source notebook does not follow the authoring conventions the grader relies on."""


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _setup_cells(nb: NotebookNode, source: Path) -> list[str]:
    """The cells tagged ``setup``, then the imports of the chapter's other (demo) cells, so that
    a visible test that uses a module a demo imported (``decoding.greedy``) finds it without
    re-running the demo."""
    setup = [c.source for c in nb.cells
             if c.cell_type == "code" and "setup" in c.metadata.get("tags", [])]
    if not setup:
        raise SpecError(f"{source}: no code cell tagged 'setup'")
    imports: list[str] = []
    for c in nb.cells:
        meta = _nbgrader(c)
        if c.cell_type != "code" or "setup" in c.metadata.get("tags", []) or meta.get("grade") \
                or meta.get("solution"):
            continue
        code = "\n".join(line for line in c.source.split("\n")
                         if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                line = ast.unparse(node)
                if line not in imports:
                    imports.append(line)
    if imports:
        setup.append("\n".join(imports) + "\n")
    return setup


def _exercises(nb: NotebookNode, source: Path) -> list[ExerciseSpec]:
    """One exercise per graded test cell, with the solution cell that defines its function."""
    solutions: dict[str, tuple[str, str | None, list[str]]] = {}
    for cell in nb.cells:
        meta = _nbgrader(cell)
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            solutions[meta["grade_id"]] = (cell.source, cell.get("id"), defined_names(
                cell.source))
    exercises = []
    for cell in nb.cells:
        meta = _nbgrader(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        hidden = "".join(m.group(1) for m in HIDDEN_RE.finditer(cell.source))
        checks = CHECK_RE.findall(hidden)
        if len(checks) != 1:
            raise SpecError(f"{source}: test cell {meta.get('grade_id')!r} must hold exactly one "
                            f"grading.check(...) call in its hidden part (a question's with "
                            f'answer="<letter>"); found {len(checks)}')
        exercise_id, function, answer = checks[0]
        owner = [gid for gid, (_, _, names) in solutions.items() if function in names]
        if len(owner) != 1:
            raise SpecError(f"{source}: no single solution cell defines {function!r} (test "
                            f"{meta.get('grade_id')!r})")
        visible = HIDDEN_RE.sub("", cell.source).rstrip() + "\n"
        exercises.append(ExerciseSpec(
            exercise_id=exercise_id, name=exercise_id.split(".", 1)[1], function=function,
            solution_grade_id=owner[0], test_grade_id=meta["grade_id"],
            solution_cell_id=solutions[owner[0]][1], test_cell_id=cell.get("id"),
            points=float(meta.get("points", 0)), visible_test=visible,
            hidden_test=without_answer(hidden), answer=answer or None,
            solution_source=solutions[owner[0]][0],
        ))
    if not exercises:
        raise SpecError(f"{source}: no graded test cells")
    return exercises


def _add_release(spec: ChapterSpec, rel: NotebookNode) -> None:
    """The release's stubs, test cells, other texts and cell ids, into ``spec``."""
    sol_ids = {ex.solution_grade_id: ex for ex in spec.exercises}
    test_ids = {ex.test_grade_id: ex for ex in spec.exercises}
    stubs: dict[str, str] = {}
    tests: dict[str, str] = {}
    for cell in rel.cells:
        gid = _nbgrader(cell).get("grade_id")
        text = normalise_source(cell.source)
        if gid in sol_ids:
            stubs[gid] = text
            spec.release_ids[cell.get("id", "")] = f"solution:{gid}"
        elif gid in test_ids:
            tests[gid] = text
            spec.release_ids[cell.get("id", "")] = f"test:{gid}"
        else:
            spec.release_texts.add(text)
            if cell.get("id"):
                spec.release_ids[cell["id"]] = "other"
    spec.exercises = [ExerciseSpec(**{**ex.__dict__,
                                      "release_stub": stubs.get(ex.solution_grade_id, ""),
                                      "release_test": tests.get(ex.test_grade_id, "")})
                      for ex in spec.exercises]


def load_chapter_spec(chapter_name: str, exercise_chapter: str, source: Path,
                      release: Path | None = None) -> ChapterSpec:
    """Parse the source notebook (and the release, when it exists) of a chapter.

    Args:
        chapter_name: the chapter's slug (``01-seq2seq``).
        exercise_chapter: the prefix of its exercise ids (``seq2seq``).
        source: the instructor's notebook.
        release: the student release; without it, every untagged cell of the source counts as
            released text (cells left as released are not re-run).

    Raises:
        SpecError: the source does not follow the authoring conventions.
    """
    raw = source.read_bytes()
    nb = notebooks.reads(raw.decode("utf-8"), str(source))
    spec = ChapterSpec(chapter_name, exercise_chapter, _setup_cells(nb, source),
                       _exercises(nb, source), source_sha=hashlib.sha256(raw).hexdigest())
    if release is not None and release.exists():
        _add_release(spec, notebooks.read(release))
    else:
        for cell in nb.cells:
            if not _nbgrader(cell).get("grade_id"):
                spec.release_texts.add(normalise_source(cell.source))
    spec.release_texts.discard("")
    return spec
