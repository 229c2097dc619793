"""The similarity report (autograder/similarity.py): copies are flagged, independent work is not.

Fast: no notebook runs. The documents are chapter 1's real beam_search exercise: the chapter's
own solution, a differently structured correct solution (below, checked against the hidden
tests), a renamed copy of course_lib's reference, and a renamed copy of a classmate's solution.

The code that ran (issue 27, item 3): in every chapter, each exercise's solution is run as the
sandbox's runner runs a cell (IPython's shell, after the chapter's setup; no notebook, no
sandbox), as written and hidden in a compressed string that is exec'd; the runner's description of
the graded function must be the trusted side's description of the instructor's solution (compiled,
never run), and the hidden copy is flagged with it and listed as dynamic code.
tests/test_autograder_chapters.py's ``encoded-copy`` does the same through the hardened engine.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import re
import sys
import zlib
from pathlib import Path

import nbformat
import pytest

from autograder.chapter_spec import load_chapter_spec
from autograder.report import similarity
from autograder.results import ExerciseOutcome, GradeResult
from autograder.run.hardened import (
    MAX_FINGERPRINT_CHARS,
    MAX_ORIGIN_CHARS,
    clean_reply,
    clean_runtime,
)
from autograder.run.sandbox_runner import FINGERPRINT_CAP, runtime_fingerprint
from coursebook.chapters import Chapter, all_chapters, find_chapter
from tests.adversarial.generate import _solution_text, renamed_copy

# A correct beam search written differently from both the chapter's solution (a list of
# candidates sorted each step) and course_lib's (tensors and topk): dictionaries of sequences.
DIFFERENT_BEAM_SEARCH = '''
def beam_search(step, prompt, beam_width, max_new_tokens, eos_id):
    """Return (tokens (t0 + n,), score) of the best hypothesis found with a beam of beam_width."""
    start = prompt.reshape(-1).tolist()
    live = {tuple(start): 0.0}
    ended = {}
    out_dtype = torch.float32
    steps = 0
    while steps < max_new_tokens and live:
        pool = dict(ended)
        for seq, total in live.items():
            row = F.log_softmax(step(torch.tensor(seq, device=prompt.device).unsqueeze(0)), dim=-1)
            out_dtype = row.dtype
            for tok, value in enumerate(row.squeeze(0).tolist()):
                pool[seq + (tok,)] = total + value
        ranked = sorted(pool.items(), key=lambda item: item[1], reverse=True)[:beam_width]
        live = {s: v for s, v in ranked if s[-1] != eos_id or len(s) == len(start)}
        ended = {s: v for s, v in ranked if s not in live}
        steps += 1
    best_seq, best_score = max({**live, **ended}.items(), key=lambda item: item[1])
    return torch.tensor(best_seq, device=prompt.device), torch.tensor(best_score, dtype=out_dtype)
'''

EXERCISE = "seq2seq.beam_search"


@pytest.fixture(scope="module")
def chapter1():
    chapters = [c for c in all_chapters() if c.number == 1]
    assert chapters, "chapter 1 has no source notebook"
    ch: Chapter = chapters[0]
    spec = load_chapter_spec(ch.slug, ch.exercises, ch.source, ch.release)
    source = nbformat.read(ch.source, as_version=4)
    solutions = {c.metadata.get("nbgrader", {}).get("grade_id"): _solution_text(c.source)
                 for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    exercise = next(ex for ex in spec.exercises if ex.exercise_id == EXERCISE)
    return {"chapter": ch, "spec": spec, "solutions": solutions, "exercise": exercise,
            "reference": similarity.reference_code(spec)[EXERCISE]}


def _flagged(chapter1, students: dict[str, str]) -> set[tuple[str, str]]:
    ex = chapter1["exercise"]
    flags, _ = similarity.compare_exercise(EXERCISE, students, chapter1["reference"],
                                           ex.release_stub)
    report = similarity.SimilarityReport(flags, {}, {})
    return {(a, b) for _, a, b in similarity.flagged_pairs(report)}


def test_the_different_solution_is_correct() -> None:
    """The independently written solution really solves the exercise (every hidden case)."""
    import torch
    import torch.nn.functional as F

    from course_lib import grading

    namespace = {"torch": torch, "F": F}
    exec(DIFFERENT_BEAM_SEARCH, namespace)
    results = grading.evaluate(EXERCISE, namespace["beam_search"])
    assert grading.format_failures(EXERCISE, results) is None


def test_renamed_copies_are_flagged_independent_solutions_are_not(chapter1) -> None:
    ref_label, ref_source = chapter1["reference"]
    students = {
        "chapter-solution": chapter1["solutions"]["beam_search"],
        "different": DIFFERENT_BEAM_SEARCH,
        "copies-reference": renamed_copy(ref_source),
        "copies-classmate": renamed_copy(DIFFERENT_BEAM_SEARCH),
    }
    assert "def beam_search" in students["copies-reference"]
    assert _flagged(chapter1, students) == {
        tuple(sorted(("copies-reference", ref_label))),
        ("copies-classmate", "different"),
    }


def test_a_copy_with_extra_code_and_reordered_lines_is_still_flagged(chapter1) -> None:
    """Padding a copy with code of one's own lowers its share, not the original's; moving
    independent lines keeps most shared runs."""
    padding = "\n".join(f"    unused_{i} = [k * {i} for k in range(3)]" for i in range(12))
    padded = renamed_copy(DIFFERENT_BEAM_SEARCH).replace("    v", padding + "\n    v", 1)
    lines = DIFFERENT_BEAM_SEARCH.split("\n")
    k = lines.index("    ended = {}")  # then out_dtype = ..., steps = 0: independent lines
    moved = lines[:k] + lines[k + 1:k + 3] + [lines[k]] + lines[k + 3:]
    reordered = renamed_copy("\n".join(moved))
    assert reordered != renamed_copy(DIFFERENT_BEAM_SEARCH)
    flags = _flagged(chapter1, {"different": DIFFERENT_BEAM_SEARCH, "padded": padded,
                                "reordered": reordered})
    assert {("different", "padded"), ("different", "reordered")} <= flags


def test_short_solutions_and_blank_stubs_are_never_flagged(chapter1) -> None:
    """Everyone writes the same short solution: that is not evidence of copying."""
    spec, solutions = chapter1["spec"], chapter1["solutions"]
    lengths = {ex.exercise_id: similarity.normalised_length(solutions[ex.solution_grade_id],
                                                           ex.release_stub)
               for ex in spec.exercises}
    ex = min((e for e in spec.exercises if lengths[e.exercise_id] > 0),
             key=lambda e: lengths[e.exercise_id])
    assert lengths[ex.exercise_id] < similarity.MIN_SHARED, "chapter 1 has no short solution"
    short = solutions[ex.solution_grade_id]
    students = {f"s{i}": short for i in range(5)} | {"stub": ex.release_stub}
    flags, compared = similarity.compare_exercise(ex.exercise_id, students, None, ex.release_stub)
    assert flags == [] and compared == 6


def test_every_long_enough_reference_copy_is_flagged(chapter1) -> None:
    """For each exercise of chapter 1: a renamed copy of course_lib's reference is flagged (when
    it is long enough to tell), the chapter's own solution and the blank stub are not."""
    spec, solutions = chapter1["spec"], chapter1["solutions"]
    references = similarity.reference_code(spec)
    checked = 0
    for ex in spec.exercises:
        if ex.exercise_id not in references:
            continue  # a question (a letter): no reference code to copy
        label, source = references[ex.exercise_id]
        copy = renamed_copy(source)
        students = {"own": solutions[ex.solution_grade_id], "copy": copy, "stub": ex.release_stub}
        flags, _ = similarity.compare_exercise(ex.exercise_id, students, (label, source),
                                               ex.release_stub)
        pairs = {(f.a.label, f.b.label if f.b else None) for f in flags}
        if similarity.normalised_length(copy, ex.release_stub) >= similarity.MIN_SHARED:
            assert pairs == {("copy", label)}, f"{ex.exercise_id}: {pairs}"
            checked += 1
        else:
            assert pairs == set(), f"{ex.exercise_id}: {pairs}"
    assert checked >= 3, "too few exercises of chapter 1 are long enough to check"


def test_a_new_layout_and_annotations_do_not_hide_a_copy() -> None:
    """Parentheses, line breaks, quotes, trailing commas, type hints and comments differ: the
    layout is made canonical before the names are normalised."""
    original = '''
def step(x, w_q, w_k, w_v, cache_k, cache_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    cache_k = torch.cat([cache_k, k[:, None]], dim=1)
    cache_v = torch.cat([cache_v, v[:, None]], dim=1)
    y = attend(q[:, None], cache_k, cache_v)
    return y[:, 0], cache_k, cache_v
'''
    disguised = '''
def step(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
         cache_k: torch.Tensor, cache_v: torch.Tensor,) -> tuple:
    "My own step."
    (query, key, value) = (x @ w_q.T,  # the projections
                           x @ w_k.T, x @ w_v.T)
    new_k: torch.Tensor = torch.cat(
        [cache_k, key[:, None],], dim=1)
    new_v = torch.cat([cache_v, value[:, None]],
                      dim=1)
    out = attend(query[:, None], new_k, new_v)
    return (out[:, 0], new_k, new_v)
'''
    assert similarity.canonical(original) != similarity.canonical(disguised)  # names differ
    flags, _ = similarity.compare_exercise("t.step", {"a": original, "b": disguised}, None)
    assert [(f.kind, f.a.owners) for f in flags] == [("identical", ["a", "b"])]


def test_identical_copies_are_one_group(chapter1) -> None:
    solution = chapter1["solutions"]["beam_search"]
    students = {"ann": solution, "bob": solution.replace("    ", "  "), "cy": "# mine\n" + solution,
                "dee": DIFFERENT_BEAM_SEARCH}
    ex = chapter1["exercise"]
    flags, _ = similarity.compare_exercise(EXERCISE, students, chapter1["reference"],
                                           ex.release_stub)
    assert [(f.kind, f.a.owners) for f in flags] == [("identical", ["ann", "bob", "cy"])]


def test_student_code_is_what_the_grader_runs(chapter1) -> None:
    ch, spec = chapter1["chapter"], chapter1["spec"]
    release = nbformat.read(ch.release, as_version=4)
    assert similarity.student_code(spec, release) == {}  # every exercise left as released
    for cell in release.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "beam_search" \
                and cell.metadata["nbgrader"].get("solution"):
            cell.source = DIFFERENT_BEAM_SEARCH
    assert similarity.student_code(spec, release) == {EXERCISE: DIFFERENT_BEAM_SEARCH}


def test_reference_code_is_course_libs_source(chapter1) -> None:
    label, source = chapter1["reference"]
    assert label == "course_lib: decoding.beam_search"
    assert source.lstrip().startswith(("@torch.no_grad()", "def beam_search"))


def test_report_shows_both_codes_side_by_side_escaped(chapter1, tmp_path: Path) -> None:
    spec = chapter1["spec"]
    hostile = DIFFERENT_BEAM_SEARCH.replace("steps = 0", "steps = 0  # </pre><script>x()</script>")
    copier = (renamed_copy(DIFFERENT_BEAM_SEARCH)
              + "\n\ndef longest(seqs):\n    return max(seqs, key=len)\n")
    students = {"a<b>": hostile, "copier": copier,
                "other": chapter1["solutions"]["beam_search"]}
    report = similarity.analyse(spec, {sid: {EXERCISE: code} for sid, code in students.items()})
    assert [(f.kind, f.a.owners, f.b.owners) for f in report.flags] == [
        ("classmates", ["a<b>"], ["copier"])]
    other = next(ex.exercise_id for ex in spec.exercises if ex.exercise_id != EXERCISE)
    assert report.compared[EXERCISE] == 3 and report.compared[other] == 0
    similarity.write_report(tmp_path, spec, report)
    page = (tmp_path / "similarity.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&lt;b&gt;" in page
    pair = page[page.index('class="pair"'):]
    # both codes as compared (shared runs marked), and each as written (folded)
    assert pair.count("<pre>") == 4 and pair.count("<details>") == 2 and "<mark>" in pair
    assert "# &lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;" in pair  # the comment, as written
    text = html.unescape(re.sub(r"</?mark>", "", pair))
    assert "ranked = sorted(pool.items()" in text and "_ranked = sorted(v6_pool.items()" in text
    with open(tmp_path / "similarity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["exercise"], r["kind"], r["students_a"], r["students_b"]) for r in rows] == [
        ("beam_search", "classmates", "a<b>", "copier")]
    assert float(rows[0]["share_a"]) >= similarity.THRESHOLD


def test_hostile_documents_do_not_break_the_comparison() -> None:
    """Code that does not tokenise as Python, NUL bytes, a huge cell: compared, never fatal."""
    students = {"nul": "def f(x):\n    return x\x00\x00" * 50, "bytes": "\udcff" * 1000,
                "huge": "x = 1\n" * 200_000, "empty": ""}
    flags, compared = similarity.compare_exercise("t.f", students, None)
    assert compared == 4 and all(f.kind == "identical" or f.b is not None for f in flags)


# --- The code that ran (issue 27, item 3) -------------------------------------------------------

def _encoded(source: str) -> str:
    """A solution cell that hides ``source`` in a string: compressed, encoded, exec'd."""
    blob = base64.b64encode(zlib.compress(source.encode())).decode()
    return f"import base64, zlib\nexec(zlib.decompress(base64.b64decode({blob!r})).decode())\n"


@pytest.fixture(scope="module")
def shell():
    """IPython's shell, as the sandbox's runner runs student cells. The shell installs its own
    namespace object as ``sys.modules["__main__"]`` (one without ``__spec__``); the worker's own is
    put back afterwards, so later tests in the same process can still spawn subprocesses."""
    from IPython.core.interactiveshell import InteractiveShell

    main = sys.modules["__main__"]
    try:
        yield InteractiveShell.instance()
    finally:
        InteractiveShell.clear_instance()
        sys.modules["__main__"] = main


def _setup(shell, setup: list[str]) -> None:
    """A fresh namespace with a chapter's setup cells run, as in the sandbox."""
    shell.reset(new_session=False)
    for code in setup:
        shell.run_cell(code, store_history=False, silent=True)


def _ran(shell, setup: list[str] | None, cell: str, function: str) -> dict[str, str]:
    """Run ``cell`` as the runner does (after ``setup``, when given, in a fresh namespace); the
    runner's description of ``function``."""
    if setup is not None:
        _setup(shell, setup)
    result = shell.run_cell(cell, store_history=False, silent=True)
    assert result.error_before_exec is None and result.error_in_exec is None, cell[:200]
    return runtime_fingerprint(shell.user_ns, function)


@pytest.mark.parametrize("slug", [c.slug for c in all_chapters()])
def test_every_encoded_solution_runs_as_the_instructors_solution(shell, slug: str) -> None:
    """In every chapter, each exercise's solution exec'd from a compressed string is, at run time,
    exactly the instructor's solution as the trusted side describes it (compiled, never run),
    comes from ``<string>``, and is flagged against it when long enough; the solution as written
    is described the same and is no dynamic code."""
    ch = find_chapter(slug)
    spec = load_chapter_spec(ch.slug, ch.exercises, ch.source, ch.release)
    references = similarity.reference_runtime(spec)
    flagged = 0
    _setup(shell, spec.setup)
    for ex in spec.exercises:
        source = _solution_text(ex.solution_source)
        expected = similarity.solution_runtime(ex)
        assert expected.startswith("python 3.") and "\ncode f " in expected, ex.exercise_id
        plain = _ran(shell, None, source, ex.function)
        hidden = _ran(shell, None, _encoded(source), ex.function)
        assert plain == {"fingerprint": expected, "code_origin": ""}, ex.exercise_id
        assert hidden == {"fingerprint": expected, "code_origin": "<string>"}, ex.exercise_id
        assert similarity.dynamic_code(source) == [], ex.exercise_id
        assert similarity.dynamic_code(_encoded(source)) == ["calls exec() (line 2)"]
        flags = similarity.compare_runtime(ex.exercise_id, {"encoded": hidden["fingerprint"]},
                                           references[ex.exercise_id])
        pairs = {(f.a.label, f.b.label) for f in flags if f.b is not None}
        if len(similarity.runtime_runs(expected)) >= similarity.RUNTIME_MIN_SHARED:
            assert ("encoded", "instructor's solution") in pairs, ex.exercise_id
            flagged += 1
        else:
            assert ("encoded", "instructor's solution") not in pairs, ex.exercise_id
    assert flagged >= 1, f"{slug}: no exercise long enough to flag"


def test_code_that_ran_renamed_or_reformatted_is_the_same_independent_code_is_not(shell) -> None:
    """Local names, comments, docstrings and layout do not reach the description; another
    algorithm does not share enough runs to be flagged."""
    setup = ["import torch\nimport torch.nn.functional as F\n"]
    different = _ran(shell, setup, DIFFERENT_BEAM_SEARCH, "beam_search")["fingerprint"]
    renamed = _ran(shell, setup, renamed_copy(DIFFERENT_BEAM_SEARCH), "beam_search")["fingerprint"]
    assert different == renamed and len(different) > 1000
    ex = next(e for e in load_chapter_spec(
        "01-seq2seq", "seq2seq", find_chapter("01-seq2seq").source).exercises
        if e.exercise_id == EXERCISE)
    chapter = _ran(shell, setup, _solution_text(ex.solution_source), "beam_search")["fingerprint"]
    flags = similarity.compare_runtime(EXERCISE, {"a": different, "b": renamed, "c": chapter})
    assert [(f.kind, f.a.owners, f.b) for f in flags] == [("identical", ["a", "b"], None)]


def test_a_helper_defined_beside_the_function_is_part_of_what_ran(shell) -> None:
    """A thin graded function that calls an exec'd helper carries the helper's code, and the
    helper's ``<string>`` origin."""
    helper = "def _impl(x):\n    return (x * 2 + 1).sum(dim=-1).softmax(dim=0)\n"
    cell = f"exec({helper!r})\n\ndef f(x):\n    return _impl(x)\n"
    got = _ran(shell, ["import torch\n"], cell, "f")
    assert "code helper _impl" in got["fingerprint"] and " softmax" in got["fingerprint"]
    assert got["code_origin"] == "<string>"
    library = _ran(shell, ["import torch\n"], "def f(x):\n    return torch.softmax(x, 0)\n", "f")
    assert "helper" not in library["fingerprint"] and library["code_origin"] == ""


@pytest.mark.parametrize("code, found", [
    ("exec(s)", "calls exec()"), ("eval(s)", "calls eval()"),
    ("c = compile(s, '<x>', 'exec')", "calls compile()"),
    ("builtins.exec(s)", "calls exec()"),
    ("import marshal", "imports marshal"), ("from marshal import loads", "imports marshal"),
    ("m = __import__(name)", "calls __import__() with a name built at run time"),
    ("m = importlib.import_module('tor' + 'ch')",
     "calls import_module() with a name built at run time"),
    ("f = types.FunctionType(code, globals())", "builds a FunctionType by hand"),
    ("c = CodeType(*args)", "builds a CodeType by hand"),
    ("g.__code__ = h.__code__", "assigns a function's __code__"),
    ("c = f.__code__.replace(co_code=b)", "rewrites a code object (replace(co_...=))"),
    ("get_ipython().run_cell(src)", "runs code through IPython (run_cell())"),
    ("f = getattr(builtins, 'ex' + 'ec')", "looks up a builtin by a name built at run time"),
])
def test_dynamic_code_is_found(code: str, found: str) -> None:
    assert similarity.dynamic_code(f"x = 1\n{code}\n") == [f"{found} (line 2)"]


def test_ordinary_code_is_not_dynamic_code() -> None:
    ordinary = ("import re, torch, importlib\npattern = re.compile('a+')\n"
                "model = torch.compile(model)\nm = importlib.import_module('math')\n"
                "n = __import__('math')\nvalue = obj.eval()\nt = s.replace('a', 'b')\n"
                "%timeit f(x)\n!pip list\n")
    assert similarity.dynamic_code(ordinary) == []
    assert similarity.dynamic_code("def f(:\n  exec(s)") == []  # does not parse: nothing to say
    assert len(similarity.dynamic_code("exec(s)\n" * 100)) == similarity.MAX_FINDINGS


def test_a_hostile_graded_object_gives_no_description() -> None:
    """Whatever the student's object does when looked at, the runner answers (empty)."""
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no")

    class Namespace(dict):
        def get(self, *args):
            raise RuntimeError("no")

    empty = {"fingerprint": "", "code_origin": ""}
    assert runtime_fingerprint({"f": Hostile()}, "f") == empty
    assert runtime_fingerprint({"f": 3}, "f") == empty
    assert runtime_fingerprint({}, "f") == empty
    assert runtime_fingerprint(Namespace(), "f") == empty
    assert runtime_fingerprint({"f": len}, ["f"]) == empty
    import functools

    def g(a, b):
        return a + b

    assert runtime_fingerprint({"f": functools.partial(g, 1)}, "f")["fingerprint"] == \
        runtime_fingerprint({"f": g}, "f")["fingerprint"] != ""


def test_a_decorated_function_is_described_not_its_wrapper(shell) -> None:
    """``@torch.no_grad()`` wraps the function in torch's code: the student's code is described
    (the same as undecorated), and it comes from the cell."""
    body = "def f(x):\n    y = x * 2\n    return y.softmax(dim=-1)\n"
    plain = _ran(shell, ["import torch\n"], body, "f")
    decorated = _ran(shell, None, "@torch.no_grad()\n" + body, "f")
    assert decorated == plain and plain["code_origin"] == "" and "softmax" in plain["fingerprint"]


def test_a_huge_function_is_described_within_the_cap() -> None:
    body = "".join(f"    x{i} = x{i - 1} * {i} + 'k{i}'\n" for i in range(1, 4000))
    namespace: dict = {}
    exec(f"def f(x0):\n{body}    return x3999\n", namespace)  # noqa: S102 - a test's own code
    text = runtime_fingerprint(namespace, "f")["fingerprint"]
    assert 0 < len(text) <= FINGERPRINT_CAP


def test_the_trusted_side_caps_and_types_what_the_runner_sent() -> None:
    cleaned = clean_reply({"ok": True, "fingerprint": "x" * (10 << 20),
                           "code_origin": {"a": 1}})
    assert len(cleaned["fingerprint"]) == MAX_FINGERPRINT_CHARS and cleaned["code_origin"] == ""
    assert clean_runtime({"fingerprint": None, "code_origin": "<string>" * 1000}) == {
        "fingerprint": "", "code_origin": ("<string>" * 1000)[:MAX_ORIGIN_CHARS]}


def test_the_outcome_keeps_what_ran_in_the_results_cache() -> None:
    r = GradeResult.new("s1", "s1/seq2seq.ipynb", "ab", "cd", "hardened", 3.0)
    r.exercises["seq2seq.f"] = ExerciseOutcome("seq2seq.f", 3.0, 3.0, "passed",
                                               fingerprint="python 3.11\ncode f",
                                               code_origin="<string>")
    r.exercises["seq2seq.g"] = ExerciseOutcome("seq2seq.g", 0.0, 3.0, "failed")
    data = json.loads(json.dumps(r.to_json()))
    assert "fingerprint" not in data["exercises"]["seq2seq.g"]
    assert GradeResult.from_json(data) == r


def test_report_flags_the_encoded_copy_and_lists_dynamic_code_escaped(chapter1, tmp_path: Path,
                                                                      shell) -> None:
    """Through analyse and write_report: the encoded copy is flagged with the instructor's
    solution (text shares nothing) and listed as dynamic code; ids and code are escaped."""
    spec, ex = chapter1["spec"], chapter1["exercise"]
    source = _solution_text(ex.solution_source)
    hidden = _ran(shell, spec.setup, _encoded(source), ex.function)
    hostile = "</pre><script>x()</script>"
    code = {"enc<b>": {EXERCISE: _encoded(source)}, "honest": {EXERCISE: DIFFERENT_BEAM_SEARCH}}
    runtime = {"enc<b>": {EXERCISE: (hidden["fingerprint"] + f"\nLOAD_CONST {hostile!r}",
                                     hidden["code_origin"])}}
    report = similarity.analyse(spec, code, runtime=runtime)
    assert [(f.kind, f.basis, f.a.owners, f.b.owners) for f in report.flags] == [
        ("reference", "runtime", ["enc<b>"], ["instructor's solution"])]
    assert [(d.student, d.findings) for d in report.dynamic] == [("enc<b>", [
        "calls exec() (line 2)",
        "at run time, its code was compiled from a string (file <string>)"])]
    similarity.write_report(tmp_path, spec, report)
    page = (tmp_path / "similarity.html").read_text()
    assert "<script>" not in page and "&lt;/pre&gt;&lt;script&gt;" in page
    assert "enc&lt;b&gt;" in page and "the same code at run time" in page
    assert "dynamic code: enc&lt;b&gt;" in page
    with open(tmp_path / "similarity.csv", newline="") as f:
        rows = [(r["kind"], r["students_a"], r["students_b"], r["basis"]) for r in
                csv.DictReader(f)]
    assert rows == [("reference", "enc<b>", "instructor's solution", "runtime"),
                    ("dynamic code", "enc<b>", "", "dynamic code")]


def test_a_copy_of_a_forbidden_course_lib_function_is_flagged(shell) -> None:
    """A function a statement forbids (chapter 9's ``rl.token_logprobs`` for
    ``response_logprobs``) is readable on Colab: its body copied under the exercise's name, as it
    runs, is flagged against that function, not only against the exercise's reference."""
    import inspect as _inspect

    from course_lib import rl

    ch = find_chapter("09-reasoning")
    spec = load_chapter_spec(ch.slug, ch.exercises, ch.source, ch.release)
    references = similarity.reference_runtime(spec)["reasoning.response_logprobs"]
    labels = [label for label, _ in references]
    assert "course_lib: rl.token_logprobs" in labels, labels
    source = "from __future__ import annotations\n\n" + _inspect.getsource(
        rl.token_logprobs).replace("def token_logprobs(", "def response_logprobs(", 1)
    copied = _ran(shell, list(spec.setup), source, "response_logprobs")["fingerprint"]
    flags = similarity.compare_runtime("reasoning.response_logprobs", {"copier": copied},
                                       references)
    assert ("copier", "course_lib: rl.token_logprobs") in {
        (f.a.label, f.b.label) for f in flags if f.b is not None}
