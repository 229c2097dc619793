"""The similarity report: solutions that look copied, from a classmate or from course_lib.

The reference guard of the hidden tests stops a solution from *calling* course_lib's reference;
it cannot stop a student from *copying* its source (``inspect.getsource`` shows it, and the
package is public), nor two students from sharing code. This report flags both for the
instructor. It never changes a grade: it is computed after ``grades.csv`` is written, from the
submitted notebooks alone, and nothing in it is read back.

How (MOSS's method, through the ``copydetect`` library):

1. **Documents**: per exercise, each student's code for it (the solution cell(s) and the helper
   cells that the grader runs with it, :func:`autograder.rebuild.plan_submission`), and the source
   of course_lib's reference of that exercise (its ``reference`` and ``forbidden`` objects, read
   with :func:`inspect.getsource` in this trusted process).
2. **Normalisation**, in two steps. First the layout (:func:`canonical`): the code is parsed and
   written back by :func:`ast.unparse` without docstrings, type annotations and comments, so
   parentheses, line breaks, quotes and trailing commas are the same whoever wrote them (code that
   does not parse is compared as it is). Then the names (``copydetect.utils.filter_code``, a
   Pygments tokeniser): every variable and attribute name becomes ``V``, every function name
   ``F``, every class name ``O``, every string ``S``; white space is dropped. Renaming
   variables, reformatting, adding or dropping annotations, rewording comments and docstrings
   change nothing.
3. **Fingerprints**: every run of :data:`NOISE` normalised characters is hashed (winnowing with a
   window of 1: all of them, so the result does not depend on Python's hash seed); those of the
   released stub of the exercise (its ``def`` line and docstring, which everybody starts from)
   are removed as boilerplate.
4. **Pairs**: two documents share the runs whose fingerprints they have in common. A pair is
   flagged when at least :data:`MIN_SHARED` normalised characters are shared *and* they make up
   at least :data:`THRESHOLD` of one of the two documents. Students whose normalised code is
   identical are listed together as one group.

What it cannot catch is written in ``instructors.md``: a solution rewritten by hand (another
loop structure, other operations) is not a copy to this method, and a short solution (a line or
two, under :data:`MIN_SHARED` characters once normalised) is never flagged, since independent
students write the same line.
"""

from __future__ import annotations

import ast
import inspect
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from copydetect.detector import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap
from markupsafe import Markup, escape

from autograder.chapter_spec import ChapterSpec, normalise_source
from autograder.rebuild import plan_submission
from autograder.report import csvsafe
from autograder.report.pages import render
from course_lib import grading

#: Shortest run of normalised characters that counts as shared (copydetect's noise threshold).
NOISE = 25
#: A pair is flagged when its shared runs make up at least this share of one of its documents...
THRESHOLD = 0.7
#: ...and at least this many normalised characters are shared (about three lines of code).
MIN_SHARED = 80
#: Each document is cut to this many characters (untrusted input: bounded work).
MAX_DOC_CHARS = 50_000
#: The HTML page shows at most this many flagged pairs per exercise (the CSV has all).
MAX_LISTED = 100


@dataclass
class Document:
    """One piece of code compared: a student's code for an exercise, or course_lib's reference.

    Attributes:
        owners: the student ids whose normalised code is this (several when identical), or the
            reference's label (``"course_lib: decoding.beam_search"``).
        code: the code as submitted (shown in the report).
        reference: whether this is course_lib's reference.
        fingerprint: copydetect's fingerprint of :func:`canonical` ``(code)``; its ``raw_code``
            is the text the shared runs are marked in.
    """

    owners: list[str]
    code: str
    reference: bool = False
    fingerprint: Any = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return ", ".join(self.owners)


@dataclass
class Flag:
    """A flagged pair (or a group of identical documents, where ``b`` is ``None``)."""

    exercise_id: str
    a: Document
    b: Document | None
    share_a: float
    share_b: float
    shared: int  # normalised characters of a in runs shared with b
    slices_a: Any = None
    slices_b: Any = None

    @property
    def kind(self) -> str:
        if self.b is None:
            return "identical"
        return "reference" if self.b.reference else "classmates"


class _Canonical(ast.NodeTransformer):
    """Drops docstrings and type annotations (what a copier rewrites first, and what tells
    nothing about the computation)."""

    @staticmethod
    def _drop_docstring(node: Any) -> None:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]

    def visit_Module(self, node: ast.Module) -> Any:
        self._drop_docstring(node)
        return self.generic_visit(node)

    def _def(self, node: Any) -> Any:
        self._drop_docstring(node)
        if not isinstance(node, ast.ClassDef):
            node.returns = None
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _def

    def visit_arg(self, node: ast.arg) -> Any:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if node.value is None:  # a bare declaration ``x: int`` computes nothing
            return None
        return ast.Assign(targets=[node.target], value=self.visit(node.value), lineno=node.lineno)


def canonical(code: str) -> str:
    """``code`` in one layout: parsed and unparsed, without docstrings, annotations, comments.

    IPython lines (``%timeit``, ``!pip``) are left out; code that does not parse (or nests too
    deeply for the parser) is returned as it is, so it is still compared.

    Example:
        >>> print(canonical('def f(x: int) -> int:\\n    "Doc."\\n    return (x  +1) # one'))
        def f(x):
            return x + 1
    """
    code = code[:MAX_DOC_CHARS]
    bare = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in code.split("\n"))
    try:
        tree = _Canonical().visit(ast.parse(bare))
        return ast.unparse(ast.fix_missing_locations(tree))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return code


def _fingerprint(code: str, boilerplate: Iterable[int] = ()) -> Any:
    """copydetect's fingerprint of :func:`canonical` ``(code)``, less the ``boilerplate`` hashes."""
    return CodeFingerprint("cell.py", NOISE, 1, boilerplate=list(boilerplate),
                           fp=io.StringIO(canonical(code)), language="python")


def normalised_length(code: str, stub: str = "") -> int:
    """How many normalised characters of ``code`` can be shared (the stub's runs left out).

    A solution shorter than :data:`MIN_SHARED` by this count is never flagged.
    """
    boilerplate = _fingerprint(stub).hashes if stub.strip() else set()
    return int(_fingerprint(code, boilerplate).token_coverage)


def student_code(spec: ChapterSpec, nb: Any) -> dict[str, str]:
    """``exercise id -> code`` of one submission: what the grader runs for each exercise.

    Exercises left as released (the stub alone) or without a solution cell are left out.
    """
    plan = plan_submission(spec, nb)
    stubs = {ex.exercise_id: ex.release_stub for ex in spec.exercises}
    out = {}
    for eid, cells in plan.groups.items():
        solutions = [c for c in cells if c.role == "solution"]
        if not solutions or all(normalise_source(c.source) == stubs.get(eid) for c in solutions):
            continue
        out[eid] = "\n\n".join(c.source for c in cells)[:MAX_DOC_CHARS]
    return out


def reference_code(spec: ChapterSpec) -> dict[str, tuple[str, str]]:
    """``exercise id -> (label, source)`` of course_lib's reference of each exercise."""
    out = {}
    exercises = grading.chapter_exercises(spec.exercise_chapter)
    for ex in spec.exercises:
        obj = exercises.get(ex.exercise_id)
        if obj is None:
            continue
        parts, names = [], []
        for target in (obj.reference, *obj.forbidden):
            target = inspect.unwrap(target) if callable(target) else target
            try:
                parts.append(inspect.getsource(target))
            except (OSError, TypeError):
                continue
            module = getattr(target, "__module__", "") or ""
            qualname = getattr(target, "__qualname__", "?")
            names.append(f"{module.removeprefix('course_lib.')}.{qualname}")
        if parts:
            out[ex.exercise_id] = ("course_lib: " + ", ".join(names), "\n\n".join(parts))
    return out


def compare_exercise(exercise_id: str, students: dict[str, str], reference: tuple[str, str] | None,
                     stub: str = "", threshold: float = THRESHOLD,
                     min_shared: int = MIN_SHARED) -> tuple[list[Flag], int]:
    """Flag the copies among one exercise's documents; return ``(flags, documents compared)``."""
    boilerplate = _fingerprint(stub).hashes if stub.strip() else set()
    groups: dict[str, Document] = {}
    for sid in sorted(students):
        try:
            fp = _fingerprint(students[sid], boilerplate)
        except Exception:  # noqa: BLE001 - a file the tokeniser chokes on is left out, not fatal
            continue
        key = fp.filtered_code
        if key in groups:
            groups[key].owners.append(sid)
        else:
            groups[key] = Document([sid], students[sid], fingerprint=fp)
    docs = list(groups.values())
    flags: list[Flag] = []
    for doc in docs:
        covered = int(doc.fingerprint.token_coverage)
        if len(doc.owners) > 1 and covered >= min_shared:
            flags.append(Flag(exercise_id, doc, None, 1.0, 1.0, covered))
    if reference is not None:
        ref = Document([reference[0]], reference[1], reference=True,
                       fingerprint=_fingerprint(reference[1], boilerplate))
        others = docs + [ref]
    else:
        others = docs
    for i, a in enumerate(docs):
        for b in others[i + 1:]:
            if not (a.fingerprint.hashes & b.fingerprint.hashes):
                continue
            shared, (share_a, share_b), (slices_a, slices_b) = compare_files(a.fingerprint,
                                                                             b.fingerprint)
            if shared >= min_shared and max(share_a, share_b) >= threshold:
                flags.append(Flag(exercise_id, a, b, float(share_a), float(share_b), int(shared),
                                  slices_a, slices_b))
    flags.sort(key=lambda f: (-max(f.share_a, f.share_b), -f.shared, f.a.label))
    return flags, sum(len(d.owners) for d in docs)


@dataclass
class SimilarityReport:
    """Every exercise's flags, and how many documents each compared."""

    flags: list[Flag]
    compared: dict[str, int]
    references: dict[str, str]  # exercise id -> reference label


def analyse(spec: ChapterSpec, code: dict[str, dict[str, str]], threshold: float = THRESHOLD,
            min_shared: int = MIN_SHARED) -> SimilarityReport:
    """Compare every student's code (``student -> exercise -> code``) per exercise."""
    refs = reference_code(spec)
    flags: list[Flag] = []
    compared = {}
    for ex in spec.exercises:
        students = {sid: per[ex.exercise_id] for sid, per in code.items() if ex.exercise_id in per}
        found, n = compare_exercise(ex.exercise_id, students, refs.get(ex.exercise_id),
                                    ex.release_stub, threshold, min_shared)
        flags += found
        compared[ex.exercise_id] = n
    return SimilarityReport(flags, compared, {k: v[0] for k, v in refs.items()})


def flagged_pairs(report: SimilarityReport) -> set[tuple[str, str, str]]:
    """``(exercise id, owner, owner)`` for every two owners a flag links (sorted within a pair).

    Example: a group ``alice, bob`` and a flag between ``bob`` and the reference give
    ``(ex, alice, bob)``, ``(ex, "course_lib: ...", bob)`` and the like.
    """
    out = set()
    for f in report.flags:
        members = f.a.owners + (f.b.owners if f.b is not None else [])
        for i, x in enumerate(members):
            for y in members[i + 1:]:
                out.add((f.exercise_id, *sorted((x, y))))
    return out


def _highlight(doc: Document, slices: Any) -> Markup:
    """The code as compared (:func:`canonical`), shared runs in ``<mark>``, HTML-escaped."""
    code = doc.fingerprint.raw_code
    if slices is None or len(slices) == 0 or np.asarray(slices).size == 0:
        return escape(code)
    text, _ = highlight_overlap(code, np.asarray(slices), "<mark>", "</mark>", escape_html=True)
    return Markup(text)  # escaped by copydetect, with only our <mark> tags added


def _shown(flag: Flag) -> dict[str, Any]:
    """A flag as the page shows it: its documents and their marked code."""
    shown: dict[str, Any] = {"a": flag.a, "b": flag.b, "shared": flag.shared,
                             "share_a": flag.share_a, "share_b": flag.share_b}
    if flag.b is not None:  # a pair: both codes as compared; a group shows its code as written
        shown.update(marked_a=_highlight(flag.a, flag.slices_a),
                     marked_b=_highlight(flag.b, flag.slices_b))
    return shown


def _write_csv(path: Path, spec: ChapterSpec, report: SimilarityReport) -> None:
    """``similarity.csv``: every flag (students' ids as text a spreadsheet must not run)."""
    names = {ex.exercise_id: ex.name for ex in spec.exercises}
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["exercise", "kind", "students_a", "students_b", "share_a", "share_b",
                    "shared_characters"])
        for fl in report.flags:
            w.writerow([names.get(fl.exercise_id, fl.exercise_id), fl.kind, ";".join(fl.a.owners),
                        ";".join(fl.b.owners) if fl.b else "", f"{fl.share_a:.2f}",
                        f"{fl.share_b:.2f}", fl.shared])


def write_report(out: Path, spec: ChapterSpec, report: SimilarityReport) -> None:
    """``similarity.html`` (flagged code side by side, from ``templates/similarity.html``, every
    value escaped) and ``similarity.csv`` under ``out``."""
    _write_csv(out / "similarity.csv", spec, report)
    table, sections = [], []
    for ex in spec.exercises:
        flags = [f for f in report.flags if f.exercise_id == ex.exercise_id]
        table.append((ex.name, report.compared.get(ex.exercise_id, 0), len(flags),
                      report.references.get(ex.exercise_id, "none")))
        if flags:
            sections.append((ex.name, [_shown(f) for f in flags[:MAX_LISTED]],
                             max(0, len(flags) - MAX_LISTED)))
    page = render("similarity.html", chapter=spec.name, min_shared=MIN_SHARED,
                  threshold=THRESHOLD, table=table, sections=sections, max_chars=MAX_DOC_CHARS)
    (out / "similarity.html").write_text(page, encoding="utf-8", errors="backslashreplace")
