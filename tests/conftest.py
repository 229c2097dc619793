"""Shared helpers of the test suite: where things are, and what an executed notebook raised."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from course_lib.exercises import _common
from coursebook import notebooks
from coursebook.chapters import all_chapters, find_chapter

ROOT = Path(__file__).resolve().parents[1]


def _peer_fixtures() -> Path:
    """Other projects' fixtures (``../shared/peer-fixtures``, never copied into the repository).

    ``COURSE_PEER_FIXTURES`` names the folder; otherwise it is the one beside this checkout, or,
    for a clone made elsewhere of a local checkout (``git clone /work/main /tmp/x/c``), the one
    beside the checkout it was cloned from.
    """
    if os.environ.get("COURSE_PEER_FIXTURES"):
        return Path(os.environ["COURSE_PEER_FIXTURES"])
    beside = ROOT.parent / "shared" / "peer-fixtures"
    if beside.exists():
        return beside
    origin = subprocess.run(["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True).stdout.strip()
    if origin and Path(origin).is_dir():
        return Path(origin).resolve().parent / "shared" / "peer-fixtures"
    return beside


PEER_FIXTURES = _peer_fixtures()

# `make test` runs two workers on two cores: one torch thread each (and in the processes they
# start), or the workers' thread pools fight over the cores and small trainings run many times
# slower (a 3 s quick run of course_lib.copying took 100 s so in CI).
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Hidden cases mix a secret into their seeds (course_lib.exercises._common): one fixed secret for
# the test process, so a failure can be reproduced; the hardened grader draws its own per run,
# and tests/test_exercise_registries.py checks several secrets. Never through the environment:
# the secret is not read from it (a graded notebook could set it).
_common.fix_process_secret("course-tests")


def chapter_slugs() -> list[str]:
    """``["01-seq2seq", ...]``: every chapter that has an instructor source notebook."""
    return [chapter.slug for chapter in all_chapters()]


def source_notebook(slug: str) -> Path:
    return find_chapter(slug).source


def release_notebook(slug: str) -> Path:
    return find_chapter(slug).release


def exercise_chapter(slug: str) -> str:
    """The exercise-id prefix of a chapter: ``"02-self-attention"`` -> ``"self_attention"``."""
    return find_chapter(slug).exercises


def load(path: Path) -> Any:
    """A notebook, read by the one reader (:func:`coursebook.notebooks.read`)."""
    return notebooks.read(path)


def nbgrader_meta(cell: dict[str, Any]) -> dict[str, Any]:
    return notebooks.nbgrader(cell)


@cache
def _cells(path: Path) -> tuple[tuple[str | None, tuple[str, ...], str], ...]:
    """``(grade_id, tags, source)`` of each cell of a notebook, read once per test session."""
    return tuple((notebooks.nbgrader(c).get("grade_id"), tuple(notebooks.tags(c)),
                  notebooks.source(c)) for c in notebooks.read(path).cells)


def _cell_source(path: Path, grade_id: str) -> str:
    found = [text for gid, _, text in _cells(path) if gid == grade_id]
    if len(found) != 1:
        raise KeyError(f"{path.name}: {len(found)} cells with grade_id {grade_id!r}")
    return found[0]


def cell_by_grade_id(slug: str, grade_id: str) -> dict[str, Any]:
    """The source notebook's cell whose nbgrader ``grade_id`` is ``grade_id``."""
    cells = [c for c in load(source_notebook(slug)).cells
             if notebooks.nbgrader(c).get("grade_id") == grade_id]
    if len(cells) != 1:
        raise KeyError(f"{slug}: {len(cells)} cells with grade_id {grade_id!r}")
    return cells[0]


def setup_namespace(slug: str) -> dict[str, Any]:
    """The names the chapter's setup cell defines (as the grader runs it: nothing else)."""
    (setup,) = [text for _, tags, text in _cells(source_notebook(slug)) if "setup" in tags]
    namespace: dict[str, Any] = {}
    exec(compile(setup, f"<{slug} setup>", "exec"), namespace)
    return namespace


def solution(slug: str, name: str) -> Any:
    """The instructor's solution of exercise ``name``, taken from the source notebook's cell.

    Tests never copy a solution: they run the solution cell (``grade_id == name``) on top of the
    setup cell, as the grader does, and return the function it defines.
    """
    namespace = setup_namespace(slug)
    source = _cell_source(source_notebook(slug), name)
    exec(compile(source, f"<{slug} solution {name}>", "exec"), namespace)
    return namespace[name]


def visible_tests(slug: str, name: str) -> str:
    """The visible tests of exercise ``name``: its test cell as the student release has it."""
    return _cell_source(release_notebook(slug), f"{name}_test")


def run_visible_tests(slug: str, name: str, fn: Callable[..., Any]) -> None:
    """Run exercise ``name``'s visible tests on ``fn``, on top of the setup cell only."""
    namespace = setup_namespace(slug)
    namespace[name] = fn
    exec(compile(visible_tests(slug, name), f"<{slug} {name} visible tests>", "exec"), namespace)


def with_notebook_signature(fn: Callable[..., Any], slug: str, name: str) -> Callable[..., Any]:
    """``fn`` (a slip, written with keyword arguments) called as the notebook's function is:
    visible tests call it positionally, with the parameter names of the solution cell."""
    params = list(inspect.signature(solution(slug, name)).parameters)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return fn(**dict(zip(params, args)), **kwargs)

    return wrapped


def cell_errors(nb: Any) -> dict[int, str]:
    """``{cell index: "ExceptionName: message"}`` for every code cell that raised."""
    errors = {}
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors[i] = f"{out['ename']}: {out['evalue']}"
    return errors


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


BUILD = ROOT / "_build"


@pytest.fixture(scope="session")
def built_book() -> Path:
    """The website, built exactly as `make book` builds it (full mode, warnings are errors), once.

    Tests that use it carry ``pytest.mark.xdist_group("book")`` so that one worker builds it;
    jupyter-cache keeps the executions, so `make book` afterwards re-executes nothing.
    """
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_LIB_QUICK", "MPLBACKEND")}
    jb = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run([str(jb), "build", str(ROOT), "--warningiserror", "--nitpick",
                           "--keep-going"], cwd=ROOT, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    BUILD.mkdir(exist_ok=True)
    (BUILD / "build.log").write_text(log)
    assert done.returncode == 0, log[-6000:]
    # Sphinx's warnings (with --warningiserror they also fail the build; --keep-going lists all).
    assert not re.search(r"WARNING:", log), log[-6000:]
    return BUILD / "html"


def glued(slug: str) -> dict[str, str]:
    """The values chapter ``slug`` glued in the executed book (``{name: text/plain repr}``).

    Claims tests (``tests/test_claims_<chapter>.py``) assert every measured sentence from these,
    after requesting the ``built_book`` fixture.
    """
    path = BUILD / "jupyter_execute" / "chapters" / slug / release_notebook(slug).name
    saved = json.loads(path.with_suffix(".glue.json").read_text())
    return {name: output["data"]["text/plain"] for name, output in saved.items()}


def glued_float(slug: str, name: str) -> float:
    """One glued number of chapter ``slug``."""
    return float(glued(slug)[name])
