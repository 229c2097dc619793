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

**The code that ran.** A copy can hide in a string (the instructor's solution zlib-compressed,
base64-encoded and ``exec``'d): the text shows nothing of it. So the report also compares what
the graded functions *were* when their hidden tests ran: the sandbox's runner describes each
graded function's code (:func:`autograder.run.sandbox_runner.describe_code`: its bytecode, one
normalised line per instruction, nested code and the helpers it calls beside it; no file names,
line numbers or local names), the trusted side keeps it in the exercise's outcome (capped, as
untrusted data), and here the descriptions are compared pairwise and with those of the
instructor's solution (its solution cell compiled in this process, never run) and of course_lib's
reference (its code object, never called), by shared runs of :data:`RUNTIME_K` instructions
(:data:`RUNTIME_MIN_SHARED` at least, :data:`THRESHOLD` of one of the two). It also flags dynamic
code execution in a submission (:func:`dynamic_code`: ``exec``, ``eval``, ``compile``,
``marshal``, ``__import__`` of a built name, code and function objects built by hand, IPython's
``run_cell``...) and a graded function whose code was not compiled from a notebook cell (its file
is ``<string>``). Flags only: nothing here changes a grade.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from copydetect.detector import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap
from markupsafe import Markup, escape

from autograder.chapter_spec import ChapterSpec, ExerciseSpec, normalise_source
from autograder.rebuild import plan_submission
from autograder.report import csvsafe
from autograder.report.pages import render
from autograder.run.sandbox_runner import describe_code
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
#: Code that ran: a shared run is this many consecutive instructions...
RUNTIME_K = 5
#: ...and a pair is flagged when at least this many runs are shared (about four lines of code)
#: and they make up at least :data:`THRESHOLD` of one of the two.
RUNTIME_MIN_SHARED = 30
#: At most this many dynamic-code findings are listed per student and exercise.
MAX_FINDINGS = 20


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
    runtime: str = field(default="", repr=False)  # the code that ran, described (runtime flags)

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
    shared: int  # normalised characters (runtime: runs of instructions) of a shared with b
    slices_a: Any = None
    slices_b: Any = None
    basis: str = "source"  # "source": the code as written; "runtime": the code that ran

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


def _python_line(text: str) -> str:
    return text.split("\n", 1)[0]


def runtime_runs(text: str, k: int = RUNTIME_K) -> set[tuple[str, ...]]:
    """The runs of ``k`` consecutive instructions of a code description (labels left out).

    Example:
        >>> len(runtime_runs("python 3.11\\ncode f args=1,0,0 flags=0\\nLOAD_FAST v0\\n"
        ...                  "RETURN_VALUE", k=2))
        2
    """
    lines = [re.sub(r"^code \S+(?: \S+)? args=", "code args=", re.sub(r"<code [^>]*>", "<code>",
                                                                         line))
             for line in text.split("\n")[1:] if line]
    return {tuple(lines[i:i + k]) for i in range(max(0, len(lines) - k + 1))}


def _helper_code(glb: Any) -> Any:
    """``name -> code`` of the functions defined in the module of globals ``glb``."""
    def helper(name: str) -> Any:
        fn = glb.get(name) if isinstance(glb, dict) else None
        if isinstance(fn, types.FunctionType) and fn.__globals__ is glb:
            return fn.__code__
        return None
    return helper


def reference_runtime(spec: ChapterSpec) -> dict[str, list[tuple[str, str]]]:
    """``exercise id -> [(label, code description)]`` of the instructor's solution and of
    course_lib's reference, made in this trusted process without running either.

    The instructor's solution cell is compiled (never executed: the function's code object is a
    constant of the cell's code) and its function described as the sandbox's runner describes a
    student's; course_lib's reference, and every course_lib function the exercise forbids (a
    taught function a student can read on Colab and copy), are described from their code objects.
    """
    out: dict[str, list[tuple[str, str]]] = {}
    exercises = grading.chapter_exercises(spec.exercise_chapter)
    for ex in spec.exercises:
        found = []
        text = solution_runtime(ex)
        if text:
            found.append(("instructor's solution", text))
        obj = exercises.get(ex.exercise_id)
        targets = [] if obj is None else [obj.reference, *obj.forbidden]
        seen: set[int] = set()
        for candidate in targets:  # the reference and every function that computes the answer
            target = inspect.unwrap(candidate) if callable(candidate) else None
            code = getattr(target, "__code__", None)
            if not isinstance(code, types.CodeType) or id(code) in seen:
                continue
            seen.add(id(code))
            module = str(getattr(target, "__module__", "") or "").removeprefix("course_lib.")
            label = f"course_lib: {module}.{getattr(target, '__qualname__', '?')}"
            found.append((label, describe_code(code, _helper_code(target.__globals__))[0]))
        if found:
            out[ex.exercise_id] = found
    return out


def solution_runtime(ex: ExerciseSpec) -> str:
    """The code description of the graded function of the instructor's solution cell (compiled,
    never run); ``""`` when the cell does not compile or does not define it."""
    if not ex.solution_source:
        return ""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(ex.solution_source)
    except Exception:  # noqa: BLE001 - IPython's syntax left as it is
        source = ex.solution_source
    try:
        module = compile(source, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    defs = {c.co_name: c for c in module.co_consts if isinstance(c, types.CodeType)}
    code = defs.get(ex.function)
    return describe_code(code, defs.get)[0] if code is not None else ""


def compare_runtime(exercise_id: str, students: dict[str, str],
                    references: Sequence[tuple[str, str]] = (),
                    written: dict[str, str] | None = None, threshold: float = THRESHOLD,
                    min_shared: int = RUNTIME_MIN_SHARED) -> list[Flag]:
    """Flag the copies among one exercise's code that ran (``student -> code description``).

    Like :func:`compare_exercise`: identical descriptions make a group; a pair is flagged when
    at least ``min_shared`` runs of :data:`RUNTIME_K` instructions are shared and they make up
    ``threshold`` of one of the two. ``references`` are compared with every student only, and only
    when made by the same Python. ``written``: each student's code as written (shown).
    """
    written = written or {}
    groups: dict[str, Document] = {}
    runs: dict[int, set[tuple[str, ...]]] = {}
    for sid in sorted(students):
        text = students[sid]
        if not text:
            continue
        key = "\n".join(text.split("\n")[1:])
        if key in groups:
            groups[key].owners.append(sid)
        else:
            groups[key] = Document([sid], written.get(sid, ""), runtime=text)
    docs = list(groups.values())
    refs = [Document([label], "", reference=True, runtime=text) for label, text in references]
    for doc in docs + refs:
        runs[id(doc)] = runtime_runs(doc.runtime)
    flags: list[Flag] = []
    for doc in docs:
        n = len(runs[id(doc)])
        if len(doc.owners) > 1 and n >= min_shared:
            flags.append(Flag(exercise_id, doc, None, 1.0, 1.0, n, basis="runtime"))
    for i, a in enumerate(docs):
        for b in docs[i + 1:] + refs:
            if b.reference and _python_line(a.runtime) != _python_line(b.runtime):
                continue
            ra, rb = runs[id(a)], runs[id(b)]
            shared = len(ra & rb)
            if shared < min_shared:
                continue
            share_a, share_b = shared / len(ra), shared / len(rb)
            if max(share_a, share_b) >= threshold:
                flags.append(Flag(exercise_id, a, b, share_a, share_b, shared, basis="runtime"))
    flags.sort(key=lambda f: (-max(f.share_a, f.share_b), -f.shared, f.a.label))
    return flags


_EXEC_NAMES = {"exec", "eval", "compile", "execfile"}
_IMPORT_NAMES = {"__import__", "import_module"}
_CODE_NAMES = {"FunctionType", "CodeType", "LambdaType"}
_IPYTHON_RUN = {"run_cell", "run_cell_async", "run_code", "runcode", "ex", "ev", "safe_execfile",
                "run_line_magic", "run_cell_magic", "transform_cell"}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` of a call's function (``""`` when it is not a plain name or attribute chain)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return ".".join(["?", *reversed(parts)]) if parts else ""


def _literal_first(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Constant) \
        and isinstance(call.args[0].value, str)


def _finding(node: ast.AST) -> str | None:
    """What one node does that runs code built at run time (``None``: nothing)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names]
        if any(n.split(".")[0] == "marshal" for n in names):
            return "imports marshal"
        return None
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "__code__"
                                            for t in node.targets):
        return "assigns a function's __code__"
    if not isinstance(node, ast.Call):
        return None
    name = _dotted(node.func)
    last = name.rsplit(".", 1)[-1]
    head = name.rsplit(".", 1)[0] if "." in name else ""
    if last in _EXEC_NAMES and head in ("", "builtins", "__builtins__"):
        return f"calls {last}()"
    if last in _IMPORT_NAMES and not _literal_first(node):
        return f"calls {last}() with a name built at run time"
    if head == "marshal" or (last in ("loads", "load") and head.endswith("marshal")):
        return f"calls {name}()"
    if last in _CODE_NAMES:
        return f"builds a {last} by hand"
    if last == "replace" and any((kw.arg or "").startswith("co_") for kw in node.keywords):
        return "rewrites a code object (replace(co_...=))"
    if last in _IPYTHON_RUN and head:
        return f"runs code through IPython ({last}())"
    if last == "getattr" and len(node.args) >= 2 and not (
            isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        if isinstance(node.args[0], ast.Name) and node.args[0].id in ("builtins", "__builtins__"):
            return "looks up a builtin by a name built at run time"
    return None


def dynamic_code(code: str) -> list[str]:
    """What in ``code`` (a student's cells) executes code built at run time, one line each.

    Example:
        >>> dynamic_code("import zlib, base64\\nexec(zlib.decompress(base64.b64decode(b)))\\n"
        ...              "m = importlib.import_module(name)\\nre.compile('x')")
        ['calls exec() (line 2)', 'calls import_module() with a name built at run time (line 3)']
    """
    code = code[:MAX_DOC_CHARS]
    bare = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in code.split("\n"))
    try:
        tree = ast.parse(bare)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return []
    found = []
    try:
        for node in ast.walk(tree):
            what = _finding(node)
            if what is not None:
                found.append((getattr(node, "lineno", 0), what))
    except RecursionError:
        pass
    found.sort()
    return [f"{what} (line {line})" for line, what in found][:MAX_FINDINGS]


def origin_finding(code_origin: str) -> str | None:
    """The runtime flag of a graded function whose code did not come from a notebook cell."""
    if not code_origin:
        return None
    if "<string>" in code_origin:
        return f"at run time, its code was compiled from a string (file {code_origin[:200]})"
    return f"at run time, its code did not come from a notebook cell (file {code_origin[:200]})"


@dataclass
class DynamicFlag:
    """A submission that executes code built at run time, for one exercise."""

    exercise_id: str
    student: str
    findings: list[str]
    code: str = ""


@dataclass
class SimilarityReport:
    """Every exercise's flags, and how many documents each compared."""

    flags: list[Flag]
    compared: dict[str, int]
    references: dict[str, str]  # exercise id -> reference label
    dynamic: list[DynamicFlag] = field(default_factory=list)
    runtime_compared: dict[str, int] = field(default_factory=dict)


#: ``student -> exercise id -> (code description, code origin)``, from the graded outcomes.
Runtime = dict[str, dict[str, tuple[str, str]]]


def _linked(flags: list[Flag]) -> set[frozenset[str]]:
    return {frozenset((x, y)) for f in flags for x in f.a.owners
            for y in (f.b.owners if f.b is not None else f.a.owners) if x != y}


def analyse(spec: ChapterSpec, code: dict[str, dict[str, str]], threshold: float = THRESHOLD,
            min_shared: int = MIN_SHARED, runtime: Runtime | None = None) -> SimilarityReport:
    """Compare every student's code (``student -> exercise -> code``) per exercise, and the
    code that ran (``runtime``, when the engine described it); flag dynamic code execution."""
    refs = reference_code(spec)
    runtime = runtime or {}
    run_refs = reference_runtime(spec) if runtime else {}
    flags: list[Flag] = []
    dynamic: list[DynamicFlag] = []
    compared, run_compared = {}, {}
    for ex in spec.exercises:
        eid = ex.exercise_id
        students = {sid: per[eid] for sid, per in code.items() if eid in per}
        found, n = compare_exercise(eid, students, refs.get(eid), ex.release_stub, threshold,
                                    min_shared)
        ran = {sid: per[eid][0] for sid, per in runtime.items() if eid in per and per[eid][0]}
        linked = _linked(found)
        for f in compare_runtime(eid, ran, run_refs.get(eid, []), students, threshold):
            pairs = {frozenset((x, y)) for x in f.a.owners
                     for y in (f.b.owners if f.b is not None else f.a.owners) if x != y}
            if not pairs or not pairs <= linked:  # not already flagged on the code as written
                found.append(f)
        flags += found
        compared[eid] = n
        run_compared[eid] = len(ran)
        for sid in sorted(set(students) | {s for s, per in runtime.items() if eid in per}):
            findings = dynamic_code(students.get(sid, ""))
            origin = origin_finding(runtime.get(sid, {}).get(eid, ("", ""))[1])
            if origin is not None:
                findings.append(origin)
            if findings:
                dynamic.append(DynamicFlag(eid, sid, findings, students.get(sid, "")))
    return SimilarityReport(flags, compared, {k: v[0] for k, v in refs.items()}, dynamic,
                            run_compared)


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
                             "share_a": flag.share_a, "share_b": flag.share_b,
                             "basis": flag.basis}
    if flag.b is not None and flag.basis == "source":  # both codes as compared, shared marked
        shown.update(marked_a=_highlight(flag.a, flag.slices_a),
                     marked_b=_highlight(flag.b, flag.slices_b))
    return shown


def _write_csv(path: Path, spec: ChapterSpec, report: SimilarityReport) -> None:
    """``similarity.csv``: every flag (students' ids as text a spreadsheet must not run).

    ``basis`` is ``source`` (the code as written), ``runtime`` (the code that ran; ``shared``
    then counts runs of :data:`RUNTIME_K` instructions) or ``dynamic code`` (``details`` says
    what executes code built at run time).
    """
    names = {ex.exercise_id: ex.name for ex in spec.exercises}
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["exercise", "kind", "students_a", "students_b", "share_a", "share_b",
                    "shared_characters", "basis", "details"])
        for fl in report.flags:
            runtime = fl.basis == "runtime"
            w.writerow([names.get(fl.exercise_id, fl.exercise_id), fl.kind, ";".join(fl.a.owners),
                        ";".join(fl.b.owners) if fl.b else "", f"{fl.share_a:.2f}",
                        f"{fl.share_b:.2f}", "" if runtime else fl.shared, fl.basis,
                        f"{fl.shared} runs of {RUNTIME_K} instructions shared" if runtime
                        else ""])
        for dyn in report.dynamic:
            w.writerow([names.get(dyn.exercise_id, dyn.exercise_id), "dynamic code", dyn.student,
                        "", "", "", "", "dynamic code", "; ".join(dyn.findings)])


def write_report(out: Path, spec: ChapterSpec, report: SimilarityReport) -> None:
    """``similarity.html`` (flagged code side by side, from ``templates/similarity.html``, every
    value escaped) and ``similarity.csv`` under ``out``."""
    _write_csv(out / "similarity.csv", spec, report)
    table, sections = [], []
    for ex in spec.exercises:
        flags = [f for f in report.flags if f.exercise_id == ex.exercise_id]
        dynamic = [d for d in report.dynamic if d.exercise_id == ex.exercise_id]
        table.append((ex.name, report.compared.get(ex.exercise_id, 0),
                      report.runtime_compared.get(ex.exercise_id, 0), len(flags), len(dynamic),
                      report.references.get(ex.exercise_id, "none")))
        if flags or dynamic:
            sections.append((ex.name, [_shown(f) for f in flags[:MAX_LISTED]],
                             max(0, len(flags) - MAX_LISTED), dynamic[:MAX_LISTED]))
    page = render("similarity.html", chapter=spec.name, min_shared=MIN_SHARED,
                  threshold=THRESHOLD, table=table, sections=sections, max_chars=MAX_DOC_CHARS,
                  runtime_k=RUNTIME_K, runtime_min=RUNTIME_MIN_SHARED)
    (out / "similarity.html").write_text(page, encoding="utf-8", errors="backslashreplace")
