"""Shared helpers of the test suite: where things are, and what an executed notebook raised."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

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
# the tests' own processes, so a failure can be reproduced; the hardened grader draws its own per
# run, and tests/test_exercise_registries.py checks several secrets.
os.environ.setdefault("COURSE_GRADING_SECRET", "course-tests")


def chapter_slugs() -> list[str]:
    """``["01-seq2seq", ...]``: every chapter that has an instructor source notebook."""
    return sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))


def source_notebook(slug: str) -> Path:
    (path,) = sorted((ROOT / "solutions" / slug).glob("*.ipynb"))
    return path


def release_notebook(slug: str) -> Path:
    return ROOT / "chapters" / slug / source_notebook(slug).name


def exercise_chapter(slug: str) -> str:
    """The exercise-id prefix of a chapter: ``"02-self-attention"`` -> ``"self_attention"``."""
    return slug.split("-", 1)[1].replace("-", "_")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def nbgrader_meta(cell: dict[str, Any]) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {})


def cell_by_grade_id(slug: str, grade_id: str) -> dict[str, Any]:
    """The source notebook's cell whose nbgrader ``grade_id`` is ``grade_id``."""
    cells = [c for c in load(source_notebook(slug))["cells"]
             if nbgrader_meta(c).get("grade_id") == grade_id]
    if len(cells) != 1:
        raise KeyError(f"{slug}: {len(cells)} cells with grade_id {grade_id!r}")
    return cells[0]


def setup_namespace(slug: str) -> dict[str, Any]:
    """The names the chapter's setup cell defines (as the grader runs it: nothing else)."""
    cells = load(source_notebook(slug))["cells"]
    (setup,) = [c for c in cells if "setup" in c.get("metadata", {}).get("tags", [])]
    namespace: dict[str, Any] = {}
    exec(compile("".join(setup["source"]), f"<{slug} setup>", "exec"), namespace)
    return namespace


def solution(slug: str, name: str) -> Any:
    """The instructor's solution of exercise ``name``, taken from the source notebook's cell.

    Tests never copy a solution: they run the solution cell (``grade_id == name``) on top of the
    setup cell, as the grader does, and return the function it defines.
    """
    namespace = setup_namespace(slug)
    source = "".join(cell_by_grade_id(slug, name)["source"])
    exec(compile(source, f"<{slug} solution {name}>", "exec"), namespace)
    return namespace[name]


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
