"""The grading sandbox holds no code that computes any exercise's answer, of any chapter.

Built generically over every chapter with an exercise module, so a new chapter is covered the day
its module lands:

* the sandbox's copy of course_lib has no exercise module (no reference, slip, diagnosis or case
  builder to call) and no body of any chapter's reference or forbidden object;
* no function left in that copy, called with a hidden case's inputs (by keyword or in order),
  returns the answer of every case of an exercise: such a function would be a whole answer to
  call, and belongs in the exercise's ``forbidden`` (or its ``allowed``, where the statement lets
  students use it);
* no course_lib function that a reference calls returns the reference's own answer (a private
  callee that is the whole answer), unless it is stripped too;
* the records a sandbox sends back are exactly the exercise's case files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from autograder.run import sandbox_runner
from autograder.run.hardened import clean_reply
from autograder.strip import (
    SANDBOX_EXERCISE_FILES,
    answers_to_strip,
    build_sandbox_course_lib,
    sandbox_modules,
)
from course_lib import grading
from course_lib.exercises._common import using_secret
from tests.adversarial import memorised

CHAPTERS = grading.exercise_chapters()


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """``chapter -> (sandbox course folder, what was stripped)``, built once per chapter."""
    out = {}
    for chapter in CHAPTERS:
        dest = tmp_path_factory.mktemp(f"sandbox-{chapter}")
        with using_secret("strip-tests"):
            values = [case.inputs() for ex in grading.chapter_exercises(chapter).values()
                      for case in ex.cases()]
        out[chapter] = dest, build_sandbox_course_lib(dest, answers_to_strip(chapter),
                                                      sandbox_modules(chapter, values))
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_sandbox_copy_has_no_exercise_module_and_no_answer_body(
        chapter: str, copies: dict[str, tuple[Path, list[str]]]) -> None:
    dest, stripped = copies[chapter]
    assert sorted(p.name for p in (dest / "course_lib" / "exercises").iterdir()) == \
        sorted(SANDBOX_EXERCISE_FILES)
    stripped_names = {entry.split(":", 1)[1] for entry in stripped}
    for obj in answers_to_strip(chapter):
        module = getattr(obj, "__module__", "") or type(obj).__module__
        if not module.startswith("course_lib.") or module.startswith("course_lib.exercises."):
            continue  # torch itself, or an exercise module (not in the sandbox at all)
        rel = Path(*module.split("."))
        if not ((dest / rel).with_suffix(".py").exists() or (dest / rel / "__init__.py").exists()):
            continue  # a module the allow-list leaves out: not in the sandbox at all
        qual = getattr(obj, "__qualname__", type(obj).__qualname__)
        assert any(n == qual or n.startswith(qual + ".") for n in stripped_names), (
            f"{chapter}: {module}.{qual} keeps its body in the sandbox")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_sandbox_copy_is_an_allow_list(chapter: str,
                                           copies: dict[str, tuple[Path, list[str]]]) -> None:
    """The copy holds the grading plumbing and the chapter's declared or unpickled modules (with
    what they import), nothing else: no module that could re-derive an answer unnamed."""
    dest, _ = copies[chapter]
    root = dest / "course_lib"
    held = {p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.py")}
    base = {"__init__", "utils", "exercises/__init__", "exercises/_common", "exercises/_calls"}
    rest = {m for m in held - base if not m.startswith("grading/")}
    wanted = {m.removeprefix("course_lib.").replace(".", "/")
              for m in _declared_and_unpickled(chapter)}
    assert rest == wanted
    assert not {"llama", "longrange"} & rest, rest


def _declared_and_unpickled(chapter: str) -> list[str]:
    with using_secret("strip-tests"):
        values = [case.inputs() for ex in grading.chapter_exercises(chapter).values()
                  for case in ex.cases()]
    return sandbox_modules(chapter, values)


_SCAN = r'''
import contextlib, copy, importlib, inspect, io, json, pkgutil, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a huge allocation fails at once
import torch
import course_lib
from course_lib import grading

assert "/sandbox-" in course_lib.__file__, course_lib.__file__
data = torch.load(sys.argv[1], weights_only=False)
candidates = []
for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
    if info.name.startswith("course_lib.exercises."):
        continue  # seeded helpers and call adapters: no answer there
    try:
        module = importlib.import_module(info.name)
    except Exception:
        continue
    for name, obj in sorted(vars(module).items()):
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            candidates.append((f"{info.name}.{name}", obj))

class Late(Exception):
    pass

def late(*_):
    raise Late()

signal.signal(signal.SIGALRM, late)

def attempt(fn, call, inputs):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(**inputs)
        target = lambda **kw: fn(**kw)
    except TypeError:
        try:
            sig.bind(*inputs.values())
        except TypeError:
            return None
        target = lambda **kw: fn(*kw.values())
    signal.alarm(3)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            out = grading.to_plain(call(target, copy.deepcopy(inputs)) if call else
                                   target(**copy.deepcopy(inputs)))
    except BaseException:
        return None
    finally:
        signal.alarm(0)
    return out

found, slow = [], {}
for ex in data:
    call = grading.resolve_call(ex["call"])
    for name, fn in candidates:
        start = time.monotonic()
        for inputs, expected, (rtol, atol) in zip(ex["inputs"], ex["expected"], ex["tol"]):
            got = attempt(fn, call, inputs)
            if got is None or grading.compare_plain(got, expected, rtol, atol):
                break
        else:
            found.append(f"{ex['id']}: {name}")
        if time.monotonic() - start > 1:
            slow[f"{ex['id']}: {name}"] = round(time.monotonic() - start, 1)
with open(sys.argv[2], "w") as f:
    json.dump({"found": found, "slow": slow}, f)
'''


def _scan(dest: Path, chapter: str, tmp_path: Path) -> list[str]:
    """``"exercise id: module.function"`` for each function of the copy at ``dest`` that gives
    the reference's answer on every hidden case of an exercise of ``chapter``."""
    data = []
    for ex in grading.chapter_exercises(chapter).values():
        if ex.cases is grading.answer_case or ex.postprocess is not None:
            continue  # a letter, or verdicts computed on the trusted side
        cases = ex.cases()
        data.append({"id": ex.id, "call": grading.call_name(ex),
                     "inputs": [case.inputs() for case in cases],
                     "expected": [grading.reference_output(ex, case) for case in cases],
                     "tol": [(case.rtol, case.atol) for case in cases]})
    torch.save(data, tmp_path / "cases.pt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_GRADING")}
    env.update(PYTHONPATH=str(dest), COURSE_LIB_QUICK="1", MPLBACKEND="Agg",
               OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _SCAN, str(tmp_path / "cases.pt"),
                           str(tmp_path / "found.json")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "found.json").read_text())
    print("slowest candidates:", report["slow"])
    return list(report["found"])


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_function_in_the_sandbox_computes_an_answer(
        chapter: str, copies: dict[str, tuple[Path, list[str]]], tmp_path: Path) -> None:
    """Every function of the sandbox's course_lib, called with each exercise's hidden inputs:
    none may return the reference's answer on every case."""
    dest, _ = copies[chapter]
    found = _scan(dest, chapter, tmp_path)
    assert not found, ("these sandbox functions compute an exercise's answer (list them in its "
                       "forbidden, or in its allowed if the statement permits them):\n"
                       + "\n".join(found))


@pytest.mark.slow
def test_the_scan_finds_the_references_when_nothing_is_stripped(tmp_path: Path) -> None:
    """The scan's control: in an unstripped copy that holds the modules of chapter 4's
    references it finds them (so the scan above can fail)."""
    dest = tmp_path / "sandbox-unstripped"
    build_sandbox_course_lib(dest, [], ["course_lib.bpe", "course_lib.sampling"])
    found = _scan(dest, "language_models", tmp_path)
    for expected in ("language_models.pair_counts: course_lib.bpe.pair_counts",
                     "language_models.merge: course_lib.bpe.merge",
                     "language_models.temperature_top_k: course_lib.sampling.filter_logits"):
        assert expected in found, found


def _course_lib_returns(fn: Any, inputs: dict[str, Any]) -> list[tuple[Any, Any]]:
    """``(code object, return value)`` of every course_lib function that ``fn`` calls."""
    seen: list[tuple[Any, Any]] = []

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_globals.get("__name__", "").startswith("course_lib."):
            seen.append((frame.f_code, arg))

    previous = sys.getprofile()
    sys.setprofile(profiler)
    try:
        fn(**inputs)
    finally:
        sys.setprofile(previous)
    return seen


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_private_callee_of_a_reference_is_its_whole_answer(chapter: str) -> None:
    """A course_lib function a reference calls, returning the reference's own answer, could be
    called instead: it must be stripped too (listed in ``forbidden``)."""
    stripped = {code for obj in answers_to_strip(chapter) for code in grading.code_objects(obj)}
    outer = {(code.co_filename, code.co_qualname) for code in stripped}
    leaks = set()
    for ex in grading.chapter_exercises(chapter).values():
        if ex.cases is grading.answer_case or ex.call is not None:
            continue
        cases = ex.cases()
        hits: dict[Any, int] = {}
        for case in cases:
            inputs = case.inputs()
            expected = grading.reference_output(ex, case)
            answered = set()
            for code, value in _course_lib_returns(ex.reference, inputs):
                if code.co_name.startswith("<") or (
                        code.co_filename, code.co_qualname.split(".<locals>")[0]) in outer:
                    continue  # stripped, or a closure made inside a stripped function
                try:
                    plain = grading.to_plain(value)
                except AssertionError:
                    continue
                if grading.compare_plain(plain, expected, case.rtol, case.atol) is None:
                    answered.add(code)
            for code in answered:
                hits[code] = hits.get(code, 0) + 1
        leaks |= {f"{ex.id}: {code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
                  for code, n in hits.items() if n == len(cases)}
    assert not leaks, "whole answers left in the sandbox:\n" + "\n".join(sorted(leaks))


def test_only_the_exercises_case_files_come_back(tmp_path: Path) -> None:
    """A hidden test that writes 200,000 files (or links, or huge ones) sends back exactly the
    exercise's case files (issue: 200,031 records once reached the host)."""
    folder = tmp_path / "records"
    folder.mkdir()
    for k in range(3):
        (folder / f"case{k:02d}.npz").write_bytes(b"x" * 10)
    for k in range(2000):
        (folder / f"case{k:06d}.npz").write_bytes(b"")
    (folder / "case03.npz").symlink_to("/etc/passwd")
    got = sandbox_runner._read_records(str(folder), 4)
    assert sorted(got) == ["case00.npz", "case01.npz", "case02.npz"]
    reply = clean_reply({"ok": True, "records": {**got, "case000001.npz": "", "x/../y": ""}}, 3)
    assert sorted(reply["records"]) == ["case00.npz", "case01.npz", "case02.npz"]


def test_a_forged_reply_is_typed_and_capped() -> None:
    """Student code can write on the reply channel: every field is checked and capped."""
    huge = "e" * (30 << 20)
    reply = clean_reply({"ok": 1, "error": huge, "output": huge, "records": "nope",
                         "seconds": "x"})
    assert reply["ok"] is False and reply["records"] == {}
    assert len(reply["error"]) < 3000 and len(reply["output"]) < 70_000
    assert json.dumps(reply)  # plain data only


MEMORISABLE = [ex for chapter in CHAPTERS for ex in grading.chapter_exercises(chapter).values()
               if memorised.memorisable(ex)]


@pytest.mark.parametrize("ex", MEMORISABLE, ids=lambda ex: ex.id)
def test_a_table_of_outputs_computed_in_advance_passes_no_hidden_case(
        ex: grading.Exercise) -> None:
    """Under the secret it was built with, a memorised table passes every hidden case (so the
    attack is real); under the grading run's own secret it passes none with random inputs."""
    with memorised.secret("the-students-guess"):
        table = memorised.build_table(ex)
        assert all(r.message is None for r in grading.evaluate(ex.id, memorised.lookup(table)))
    with memorised.secret("this-grading-run"):
        results = grading.evaluate(ex.id, memorised.lookup(table))
    assert any(r.message and "input not memorised" in r.message for r in results), ex.id
