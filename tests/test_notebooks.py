"""Every chapter's notebooks: structure and conventions, and how a wrong attempt fails.

Nothing here runs a whole notebook: each check that needs one is made on an execution another
test does anyway (bench/count_executions.py counts them), once per chapter and copy:

* the instructor's source top to bottom, every visible and hidden test passing, no cell raising:
  the stock-nbgrader run of the solution (tests/test_grading_chapters.py), which executes the
  solved release with the hidden tests put back, i.e. the source, and grades it as well;
* a blank exercise scores zero under a grader (its test cell raises ``NotImplementedError`` under
  ``NBGRADER_EXECUTION``): the stock-nbgrader run of the blank release, same file;
* each exercise runs on the setup cell alone (setup, solution, test; no demo): the hardened
  grader, which runs exactly that, giving the solution full marks
  (tests/test_autograder_chapters.py);
* Run All on the blank release and on the solved one (every test cell says "not attempted yet";
  every visible test passes): the Colab copy, whose code cells are the release's, on Colab's
  runtime (tests/test_colab_runtime.py);
* the full-length run: the book build (tests/test_book.py), whose run times
  `bench/chapter_times.py` reports.
"""

from __future__ import annotations

import re

import pytest
import yaml

from course_lib import grading
from tests.conftest import (
    ROOT,
    chapter_slugs,
    exercise_chapter,
    load,
    nbgrader_meta,
    release_notebook,
    source_notebook,
)

SLUGS = chapter_slugs()


def test_there_are_chapters() -> None:
    assert "01-seq2seq" in SLUGS


def _exercise_cells(nb: dict) -> tuple[list[dict], list[dict]]:
    solutions = [c for c in nb["cells"] if nbgrader_meta(c).get("solution")]
    tests = [c for c in nb["cells"] if nbgrader_meta(c).get("grade")]
    return solutions, tests


@pytest.mark.parametrize("slug", SLUGS)
def test_source_notebook_follows_the_chapter_template(slug: str) -> None:
    nb = load(source_notebook(slug))
    cells = nb["cells"]
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    assert not [i for i, c in enumerate(cells) if c["cell_type"] == "code" and c.get("outputs")], \
        "source notebooks are committed without outputs"
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# ")
    setup = [c for c in cells if "setup" in c.get("metadata", {}).get("tags", [])]
    assert len(setup) == 1, "exactly one setup cell (tag 'setup')"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] in "".join(setup[0]["source"]), \
        "the setup cell installs course_lib from the repository named in _config.yml"
    assert 'os.environ.get("COURSE_LIB_URL"' in "".join(setup[0]["source"]), \
        "the setup cell lets COURSE_LIB_URL name another repository (AUTHORING.md's setup cell)"

    solutions, tests = _exercise_cells(nb)
    chapter = exercise_chapter(slug)
    registry = grading.chapter_exercises(chapter)
    assert len(solutions) >= 6, "at least six graded exercises"
    assert len(tests) == len(solutions)
    total = 0
    for sol, test in zip(solutions, tests):
        name = nbgrader_meta(sol)["grade_id"]
        meta = nbgrader_meta(test)
        assert meta["grade_id"] == f"{name}_test", f"test cell of {name} is {meta['grade_id']}"
        assert cells.index(test) > cells.index(sol)
        tags = set(test["metadata"].get("tags", []))
        assert "remove-output" in tags, f"{name}: the website hides the test cell's output"
        assert "raises-exception" not in tags, \
            f"{name}: a blank exercise's test cell no longer raises (grading.visible_tests)"
        source = "".join(test["source"])
        visible = f'with grading.visible_tests("{chapter}.{name}"):'
        assert visible in source.split("### BEGIN HIDDEN TESTS")[0], \
            f"{name}: the visible tests run inside {visible}"
        call = f'grading.check("{chapter}.{name}", {name}'  # a question's also gives its answer
        assert "### BEGIN HIDDEN TESTS" in source and call in source, f"{name}: hidden test {call}"
        assert "### BEGIN SOLUTION" in "".join(sol["source"])
        assert f"{chapter}.{name}" in registry, f"{chapter}.{name} is not registered"
        assert meta["points"] > 0, f"{name}: a graded test cell states its points"
        total += meta["points"]
    assert re.search(rf"\b{total} points\b", "".join(cells[0]["source"])), \
        f"the title cell states the total, {total} points"
    assert sorted(registry) == sorted(f"{chapter}.{nbgrader_meta(s)['grade_id']}"
                                      for s in solutions)


# The release and its Colab copy are checked against the source, every chapter in one call, by
# tests/test_publish_release.py::test_committed_chapters_are_in_sync_with_solutions.


@pytest.mark.parametrize("slug", SLUGS)
def test_release_has_no_solutions_and_no_hidden_tests(slug: str) -> None:
    text = release_notebook(slug).read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "grading.check(" not in text
    # A leak is a line that the source has only inside solution blocks and the release has too.
    inside, outside = set(), set()
    for cell in load(source_notebook(slug))["cells"]:
        parts = re.split(r"### (?:BEGIN|END) SOLUTION", "".join(cell["source"]))
        for k, part in enumerate(parts):
            lines = {ln.strip() for ln in part.splitlines() if len(ln.strip()) > 20}
            (inside if k % 2 else outside).update(lines)
    release_lines = {ln.strip() for c in load(release_notebook(slug))["cells"]
                     for ln in "".join(c["source"]).splitlines()}
    leaked = (inside - outside) & release_lines
    assert not leaked, f"solution lines in the release: {sorted(leaked)[:3]}"


@pytest.mark.parametrize("slug", SLUGS)
def test_a_wrong_attempt_still_fails_loudly(slug: str, capsys) -> None:
    """Each released test cell, run on a function that returns nothing useful, raises."""
    cells = load(release_notebook(slug))["cells"]
    (setup,) = [c for c in cells if "setup" in c.get("metadata", {}).get("tags", [])]
    base: dict = {}
    exec("".join(setup["source"]), base)
    solutions, tests = _exercise_cells({"cells": cells})
    for solution, test in zip(solutions, tests):
        name = nbgrader_meta(solution)["grade_id"]
        namespace = dict(base)
        exec(f"def {name}(*args, **kwargs):\n    return None\n", namespace)
        with pytest.raises(Exception) as err:
            exec("".join(test["source"]), namespace)
        assert not isinstance(err.value, NotImplementedError), name
        assert str(err.value), f"{name}: a failing visible test says what is wrong"
