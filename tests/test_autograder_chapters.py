"""Every chapter under ``solutions/``, found by glob, through the hardened grader.

A chapter is covered the day its source notebook lands in ``solutions/NN-slug/slug.ipynb``:
nothing here names a chapter.

Fast checks, without running a notebook (``make test-fast`` runs them):

* the grader can read the chapter: every test cell's hidden part names one exercise, a single
  solution cell defines its function, and it is worth points.

Slow (one grading run per chapter): copies derived from the chapter's own source and release are
graded together in ONE hardened batch (a module-scoped fixture; the sandboxes run in quick mode),
and each copy must get exactly its grade:

* ``solution``: the source's solutions, full marks; ``blank``: the release, zero;
* ``partial``: every other exercise solved, exactly those points;
* ``calls-reference``: every exercise calls course_lib's reference (the profiler guard), zero;
* ``guard-off``: every exercise switches the guard off first, then calls the reference: the
  sandbox's copy of course_lib has the reference's body stripped, zero;
* ``colab``: the solutions as Colab saves them, full marks; ``stripped-metadata``: every cell's
  metadata and id removed, full marks (solutions found by their ``def`` line);
* ``module-helpers``: every exercise switches the guard off and calls the chapter's exercise
  module (its reference, which its slips and helpers reach too): the sandbox has no exercise
  module, zero;
* ``memorised``: every exercise a table of course_lib's outputs on the hidden inputs as a
  student would build them in advance (tests/adversarial/memorised.py), no implementation: the
  grading run's secret changes the inputs, zero.
* ``imports-outside``: every solution first imports a package of the development environment
  that the statements rule out (``transformers``) or, every other exercise, a course_lib module
  that is not the chapter's sandbox's (``course_lib.llama``, whose ``KVCache`` would re-derive a
  KV-cache size): the sandbox holds neither, zero, and the feedback names the import;
* ``meter-off``: every exercise with a memory rule builds the forbidden tensor with the
  in-kernel meter switched off (tests/adversarial/memory.py); the grader limits the sandbox's
  memory from outside, zero (the others are left blank).
* ``encoded-copy``: every solution cell the instructor's solution zlib-compressed, base64-encoded
  and ``exec``'d: full marks (it is correct code), and the similarity report flags it, from the
  code that ran, as a copy of the instructor's solution (every exercise long enough to tell) and
  lists it as dynamic code in every exercise.

tests/test_grading_chapters.py runs the solution and the blank release through both engines;
this file is the hardened grader's defences, chapter by chapter.
"""

from __future__ import annotations

import base64
import copy
import csv
import json
import os
import re
import subprocess
import sys
import time
import zlib

import nbformat
import pytest

from autograder.chapter_spec import load_chapter_spec
from autograder.report import similarity
from autograder.strip import sandbox_modules
from course_lib import grading
from course_lib.exercises._common import using_secret
from coursebook.chapters import REPO, Chapter, all_chapters, find_chapter
from tests.adversarial import memorised, memory
from tests.adversarial.chapters import released_copy
from tests.adversarial.generate import _solution_text, with_solution_cells
from tests.fixtures.colab.transform import colab_transform

CHAPTERS = [c.slug for c in all_chapters()]  # solutions/NN-slug/slug.ipynb, by glob
COPIES = ["solution", "blank", "partial", "calls-reference", "guard-off", "colab",
          "stripped-metadata", "module-helpers", "memorised", "imports-outside", "meter-off",
          "encoded-copy"]


def test_chapters_are_found_by_glob() -> None:
    globbed = sorted(p.parent.name for p in (REPO / "solutions").glob("[0-9][0-9]-*/*.ipynb")
                     if p.name == p.parent.name.split("-", 1)[1] + ".ipynb")
    assert CHAPTERS and CHAPTERS == globbed


@pytest.mark.parametrize("name", CHAPTERS)
def test_the_grader_can_read_the_chapter(name: str) -> None:
    """One check per test cell, one solution cell defining its function, points, registered."""
    from course_lib import grading

    chapter = find_chapter(name)
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source)
    registered = grading.chapter_exercises(chapter.exercises)
    for ex in spec.exercises:
        assert ex.points > 0, f"{name}: {ex.exercise_id} is worth no points"
        assert ex.exercise_id in registered, f"{name}: {ex.exercise_id} is not registered"
    assert len({ex.exercise_id for ex in spec.exercises}) == len(spec.exercises)


def _dump(nb) -> str:
    return json.dumps(nb, indent=1, sort_keys=True) + "\n"


def _copies(chapter: Chapter, spec) -> dict[str, tuple[str, dict[str, float]]]:
    """``name -> (notebook text, expected points per exercise)``."""
    release = nbformat.read(chapter.release, as_version=4)
    source = nbformat.read(chapter.source, as_version=4)
    src = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in source.cells}
    by_sol = spec.by_solution_grade_id()
    full = {ex.exercise_id: ex.points for ex in spec.exercises}
    zero = {ex.exercise_id: 0.0 for ex in spec.exercises}

    def with_cells(body) -> nbformat.NotebookNode:
        return with_solution_cells(release, by_sol, body)

    def solution(ex):
        return _solution_text(src[ex.solution_grade_id])

    def call_reference(guard_off: bool):
        def body(ex):
            lines = ["import sys, threading", "sys.setprofile(None)",
                     "threading.setprofile(None)"] if guard_off else []
            lines += ["from course_lib import grading",
                      f"return grading.get_exercise({ex.exercise_id!r}).reference(*args, **kwargs)"]
            return f"def {ex.function}(*args, **kwargs):\n" + "".join(f"    {x}\n" for x in lines)
        return body

    def module_helpers(ex):
        chapter_module = f"course_lib.exercises.{ex.exercise_id.split('.', 1)[0]}"
        lines = ["import importlib, sys, threading", "sys.setprofile(None)",
                 "threading.setprofile(None)",
                 f"module = importlib.import_module({chapter_module!r})",
                 f"return module.EXERCISES[{ex.exercise_id!r}].reference(*args, **kwargs)"]
        return f"def {ex.function}(*args, **kwargs):\n" + "".join(f"    {x}\n" for x in lines)

    def memorised_cell(ex):
        registered = grading.get_exercise(ex.exercise_id)
        if not memorised.memorisable(registered):
            return None  # a letter or a random function: left blank
        with memorised.secret("a-guess-made-before-the-grading-run"):
            return memorised.cell_source(ex.function, memorised.build_table(registered))

    outside_module = _course_module_outside(chapter.exercises)
    imports = {ex.exercise_id: ("import transformers" if i % 2 == 0
                                else f"import {outside_module}")
               for i, ex in enumerate(spec.exercises)}

    def imports_outside(ex):
        text = _solution_text(src[ex.solution_grade_id])
        head, sep, body = text.partition(":\n")
        return f"{head}{sep}    {imports[ex.exercise_id]}\n{body}"

    def meter_off(ex):
        return memory.NAIVE.get(ex.exercise_id)

    def encoded(ex):
        blob = base64.b64encode(zlib.compress(solution(ex).encode())).decode()
        return f"import base64, zlib\nexec(zlib.decompress(base64.b64decode({blob!r})).decode())\n"

    solved = with_cells(solution)
    half = {ex.exercise_id for i, ex in enumerate(spec.exercises) if i % 2 == 0}
    stripped = copy.deepcopy(solved)
    for cell in stripped.cells:
        cell.metadata = {}
        cell.pop("id", None)
    stripped.nbformat_minor = 4
    return {
        "solution": (_dump(solved), full),
        "blank": (_dump(release), zero),
        "partial": (_dump(with_cells(lambda ex: solution(ex) if ex.exercise_id in half else None)),
                    {eid: (p if eid in half else 0.0) for eid, p in full.items()}),
        "calls-reference": (_dump(with_cells(call_reference(False))), zero),
        "guard-off": (_dump(with_cells(call_reference(True))), zero),
        "colab": (colab_transform(_dump(solved).encode(), chapter.release.name).decode(), full),
        "stripped-metadata": (_dump(stripped), full),
        "module-helpers": (_dump(with_cells(module_helpers)), zero),
        "memorised": (_dump(with_cells(memorised_cell)), zero),
        "imports-outside": (_dump(with_cells(imports_outside)), zero),
        "meter-off": (_dump(with_cells(meter_off)), zero),
        "encoded-copy": (_dump(with_cells(encoded)), full),
    }


def _course_module_outside(chapter: str) -> str:
    """A course_lib module that is not in ``chapter``'s sandbox (``course_lib.llama`` unless the
    chapter's sandbox holds it): a solution importing it scores 0."""
    with using_secret("attack-copies"):
        values = [c.inputs() for ex in grading.chapter_exercises(chapter).values()
                  for c in ex.cases()]
    inside = set(sandbox_modules(chapter, values))
    for name in ("course_lib.llama", "course_lib.longrange", "course_lib.gpt", "course_lib.lora"):
        if name not in inside:
            return name
    raise AssertionError(f"{chapter}'s sandbox holds every candidate module")


@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=[pytest.mark.slow, pytest.mark.xdist_group(f"grade-{name}")])
    for name in CHAPTERS])
def graded(request, tmp_path_factory) -> dict:
    """One hardened grading run per chapter, of all its copies together, shared by the tests."""
    name = request.param
    tmp = tmp_path_factory.mktemp(f"chapter-{name}")
    # A snapshot of the source (a chapter edited meanwhile changes nothing in this run) and its
    # release as `python -m publish release` writes it (tests.adversarial.chapters).
    chapter = released_copy(find_chapter(name), tmp)
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source, chapter.release)
    copies = _copies(chapter, spec)
    subs = tmp / "subs"
    for student, (text, _) in copies.items():
        (subs / student).mkdir(parents=True)
        (subs / student / chapter.release.name).write_text(text)
    out = tmp / "out"
    cmd = [sys.executable, "-m", "autograder", "grade", name, str(subs), "--out", str(out),
           "--root", str(chapter.root), "--no-progress", "--workers", "2"]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "COURSE_LIB_QUICK": "1"},
                          capture_output=True, text=True, timeout=1200)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print(f"{name}: {len(copies)} copies graded in one run in {seconds:.0f} s")
    with open(out / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    results = {s: json.loads((out / "results" / f"{s}.json").read_text()) for s in copies}
    return {"name": name, "spec": spec, "copies": copies, "grades": grades, "results": results,
            "out": out}


@pytest.mark.parametrize("copy_name", COPIES)
def test_each_copy_gets_exactly_its_grade(graded: dict, copy_name: str) -> None:
    expected = graded["copies"][copy_name][1]
    row = graded["grades"][copy_name]
    got = {ex.exercise_id: float(row[ex.name]) for ex in graded["spec"].exercises}
    result = graded["results"][copy_name]
    why = {eid: r["messages"][:2] for eid, r in result["exercises"].items()
           if r["points"] != expected[eid]}
    assert got == expected, f"{graded['name']} {copy_name}: {why}"
    assert result["status"] == "graded"


@pytest.mark.parametrize("copy_name", ["calls-reference", "guard-off"])
def test_reference_calls_fail_with_the_reference_message(graded: dict, copy_name: str) -> None:
    """The guard (in the kernel) and the stripped bodies (in the sandbox) say the same thing."""
    for eid, r in graded["results"][copy_name]["exercises"].items():
        assert any("calls course_lib's implementation" in m for m in r["messages"]), \
            f"{graded['name']} {copy_name} {eid}: {r['messages'][:2]}"


def test_memorised_outputs_fail_the_hidden_cases_themselves(graded: dict) -> None:
    """Not only the visible tests: the hidden cases of every memorisable exercise miss the table."""
    for ex in graded["spec"].exercises:
        if not memorised.memorisable(grading.get_exercise(ex.exercise_id)):
            continue
        messages = graded["results"]["memorised"]["exercises"][ex.exercise_id]["messages"]
        assert any("input not memorised" in m for m in messages), \
            f"{graded['name']} {ex.exercise_id}: {messages[:2]}"


def test_imports_outside_the_allow_list_are_named(graded: dict) -> None:
    """A solution that imports a package the statements rule out scores 0, and the feedback says
    which import (the sandbox does not hold the package)."""
    for eid, r in graded["results"]["imports-outside"]["exercises"].items():
        assert any(re.search(r"imports (transformers|course_lib\.\w+), which", m)
                   for m in r["messages"]), f"{graded['name']} {eid}: {r['messages'][:2]}"


def test_memory_rules_are_graded_from_outside_the_kernel(graded: dict) -> None:
    """The forbidden tensor built with the meter off fails on the memory probe, in the words of
    the memory rule."""
    results = graded["results"]["meter-off"]["exercises"]
    for eid in memory.NAIVE:
        if eid in results:
            assert any("more memory than" in m for m in results[eid]["messages"]), \
                f"{graded['name']} {eid}: {results[eid]['messages'][:3]}"


def test_a_copy_hidden_in_a_string_is_flagged_from_the_code_that_ran(graded: dict) -> None:
    """The encoded copy's text shares nothing with anybody's; what ran is the instructor's
    solution: flagged with it wherever the function is long enough to tell, and listed as dynamic
    code (exec, and a function compiled from a string) in every exercise; the solution is not."""
    with open(graded["out"] / "similarity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for ex in graded["spec"].exercises:
        mine = [r for r in rows if r["exercise"] == ex.name]
        dynamic = {r["students_a"]: r["details"] for r in mine if r["kind"] == "dynamic code"}
        assert "calls exec()" in dynamic.get("encoded-copy", ""), (graded["name"], ex.name)
        assert "compiled from a string" in dynamic["encoded-copy"], (graded["name"], ex.name)
        assert "solution" not in dynamic, (graded["name"], ex.name, dynamic.get("solution"))
        linked = any(r["basis"] == "runtime" and r["students_b"] == "instructor's solution"
                     and "encoded-copy" in r["students_a"].split(";") for r in mine)
        runs = len(similarity.runtime_runs(similarity.solution_runtime(ex)))
        assert linked == (runs >= similarity.RUNTIME_MIN_SHARED), (graded["name"], ex.name, runs)
