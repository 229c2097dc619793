"""``python -m autograder gradescope CHAPTER --out DIR``: a Gradescope autograder zip.

``DIR/<chapter>-gradescope.zip`` holds, at its root, ``setup.sh`` (Gradescope runs it once, as
root, when it builds the image: a virtual environment at ``/opt/course-venv`` with a pinned
CPU-only torch and the grading dependencies), ``run_autograder`` (run per submission), and the
bundle (:mod:`autograder.platform_common`: ``course/`` with course_lib and the autograder at the
zip's commit, the chapter's source and release, ``bundle.json``).

Per submission Gradescope unzips the zip into ``/autograder/source``, puts the student's files in
``/autograder/submission`` (and ``/autograder/submission_metadata.json``: the student, the
assignment and every earlier submission of this student with its score and full results, hidden
feedback included) and runs ``/autograder/run_autograder``, which runs
``python -m autograder.gradescope run``: it finds the ``.ipynb`` whatever its name, grades it with
the hardened engine (bubblewrap where the container lets it create namespaces, else the
fallback runner) and writes ``/autograder/results/results.json``. With the fallback runner,
``/autograder/source`` and ``submission_metadata.json`` are made root's alone (mode 0700/0600)
before any student code runs; the bubblewrap sandbox holds no ``/autograder`` at all.

**Nothing a student sees before the grades are published tells the hidden tests' outcome or
a total** (the reference is otter-grader's Gradescope export: per-test scores carry the tests'
visibility and the top level gives no ``score`` of its own, so Gradescope adds up the tests'
scores and shows the sum only with them). In Gradescope's documented layout (the autograder
specification, "Output format" and "Controlling test case visibility": ``visibility`` of a test
is ``hidden``, ``after_due_date``, ``after_published`` or ``visible``; the top-level
``visibility`` is the default of every test; ``stdout_visibility`` the same for the script's
output; ``extra_data`` is stored, not shown), results.json holds:

* per exercise, one scored test ``"<exercise>"`` (``score``, ``max_score``, ``status``,
  ``output``: the feedback page's text for that exercise) with ``visibility``
  ``after_published`` (the hidden tests' verdict: when the instructor publishes the grades), or
  ``after_due_date`` when the zip was built with ``--hidden-tests after_due_date`` (stored in
  ``bundle.json``'s ``settings.hidden_tests``; with late submissions allowed, Gradescope shows
  them after the late due date); and one unscored test ``"<exercise>: visible tests"``
  (``score`` and ``max_score`` 0) with ``visibility`` ``visible``: what the notebook's own
  visible tests printed and whether they passed, at once;
* at the top level ``visibility: visible`` with an ``output`` that holds the could-not-grade
  reason, repairs and the bundle's commit, never points; ``stdout_visibility: hidden`` (the
  instructor's log); no ``score`` (see above); ``execution_time``; ``extra_data`` (runner,
  commit, file digest, peak memory; no points);
* a file that cannot be graded (none submitted, truncated, not a notebook) gives every test 0,
  ``visible``, with the reason (nothing hidden ran), and so does any error of the grader itself
  (its details go to the hidden stdout): ``run`` never exits without a results.json.

:data:`RESULTS_SCHEMA` checks the layout in the tests; they also check, over every chapter,
that no field visible before publication holds a total or a hidden test's outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: platform_common is imported inside run()'s try
    from autograder.platform_common import Graded
    from coursebook.chapters import Chapter

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission (as root, in a fresh container of the image that
# setup.sh built). It never exits without /autograder/results/results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
VENV="${COURSE_VENV:-/opt/course-venv}"
mkdir -p "$ROOT/results"
COURSE_PLATFORM_CONTAINER=1 PYTHONPATH="$ROOT/source/course" \
  "$VENV/bin/python" -s -m autograder.gradescope run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  msg="The autograder could not run (exit status $status): please tell your instructor."
  printf '{"score": 0, "output": "%s", "tests": []}\n' "$msg" > "$ROOT/results/results.json"
fi
exit 0
"""

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
#: When students may see the hidden tests' points and messages (``--hidden-tests``).
HIDDEN_TESTS_VISIBILITY = ("after_published", "after_due_date")

#: Gradescope's results.json, as its autograder documentation describes it (written from that
#: description: the fields below are the documented ones, everything optional but ``score`` or
#: per-test scores).
RESULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "test_output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "test_name_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": {"enum": list(VISIBILITIES)},
        "stdout_visibility": {"enum": list(VISIBILITIES)},
        "extra_data": {"type": "object"},
        "leaderboard": {"type": "array"},
        "tests": {"type": "array", "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "score", "max_score", "status", "output", "visibility"],
            "properties": {
                "score": {"type": "number"},
                "max_score": {"type": "number", "minimum": 0},
                "status": {"enum": ["passed", "failed"]},
                "name": {"type": "string"},
                "name_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
                "number": {"type": "string"},
                "output": {"type": "string"},
                "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "visibility": {"enum": list(VISIBILITIES)},
                "extra_data": {"type": "object"},
            },
        }},
    },
}


def build(chapter: Chapter, out: Path, allow_dirty: bool = False,
          settings: dict[str, Any] | None = None, hidden_tests: str = "after_published") -> Path:
    """Write ``out/<chapter>-gradescope.zip``; return its path.

    Args:
        hidden_tests: when students see the hidden tests' points and messages, one of
            :data:`HIDDEN_TESTS_VISIBILITY` (stored in ``bundle.json``'s settings).

    Raises:
        platform_common.BundleError: a dirty tree without ``allow_dirty``, or an unknown
            ``hidden_tests``.
    """
    from autograder.platform_common import BundleError, write_bundle  # see run()

    if hidden_tests not in HIDDEN_TESTS_VISIBILITY:
        raise BundleError(f"--hidden-tests must be one of {', '.join(HIDDEN_TESTS_VISIBILITY)}, "
                          f"not {hidden_tests!r}")
    settings = {**(settings or {}), "hidden_tests": hidden_tests}
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="gradescope-", dir=out))
    try:
        write_bundle(chapter, staging, allow_dirty, settings)
        run = staging / "run_autograder"
        run.write_text(RUN_AUTOGRADER)
        run.chmod(0o755)
        target = out / f"{chapter.slug}-gradescope.zip"
        tmp = target.with_suffix(".zip.part")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    rel = path.relative_to(staging).as_posix()
                    info = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
                    info.external_attr = ((0o755 if os.access(path, os.X_OK) else 0o644)
                                          | 0o100000) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, path.read_bytes())
        tmp.replace(target)
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def results_json(graded: Graded, hidden: str = "after_published") -> dict[str, Any]:
    """Gradescope's results.json of one graded file (:class:`platform_common.Graded`).

    Args:
        graded: the graded file.
        hidden: the visibility of the scored (hidden tests') entries, one of
            :data:`HIDDEN_TESTS_VISIBILITY`.
    """
    from autograder.platform_common import (  # see run()
        feedback_text,
        general_text,
        visible_test_log,
    )

    if hidden not in HIDDEN_TESTS_VISIBILITY:
        raise ValueError(f"the hidden tests' visibility must be one of "
                         f"{', '.join(HIDDEN_TESTS_VISIBILITY)}, not {hidden!r}")
    r, spec = graded.result, graded.spec
    ok = r.status == "graded"
    tests = []
    for i, ex in enumerate(spec.exercises, 1):
        er = r.exercises[ex.exercise_id]
        tests.append({"name": ex.name, "number": f"{i}.1", "score": float(er.points),
                      "max_score": float(ex.points),
                      "status": "passed" if er.status == "passed" else "failed",
                      "output": feedback_text(r, ex.exercise_id), "output_format": "text",
                      # an ungradable file: nothing hidden ran, the reason now
                      "visibility": hidden if ok else "visible"})
        if ok:
            passed, text = visible_test_log(r, ex.exercise_id)
            tests.append({"name": f"{ex.name}: visible tests", "number": f"{i}.0",
                          "score": 0.0, "max_score": 0.0,
                          "status": "passed" if passed else "failed",
                          "output": text, "output_format": "text", "visibility": "visible"})
    when = {"after_published": "when your instructor publishes the grades",
            "after_due_date": "after the due date"}[hidden]
    output = general_text(graded, total=False)
    if ok:
        output += (f"\nEach exercise's points and its hidden tests' results are shown {when}; "
                   "what your notebook's visible tests printed is below.")
    # no top-level "score": Gradescope adds up the tests' scores and shows the sum with them
    return {"execution_time": round(graded.seconds, 2), "output": output,
            "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden",
            "tests": tests,
            "extra_data": {"chapter": graded.bundle.get("chapter"),
                           "commit": graded.bundle.get("commit"), "runner": graded.runner,
                           "file": r.file, "sha256": r.sha256,
                           "max_total": float(r.max_total), "status": r.status,
                           "hidden_tests": hidden, "peak_rss_mb": graded.memory}}


def total_score(data: dict[str, Any]) -> float:
    """The points of a results.json as Gradescope counts them: its ``score``, else the sum of
    its tests' scores."""
    if "score" in data:
        return float(data["score"])
    return float(sum(t.get("score", 0.0) for t in data.get("tests", [])))


def _failure(seconds: float) -> dict[str, Any]:
    """The results.json of a grader that failed (the details are in the hidden stdout)."""
    return {"score": 0.0, "execution_time": round(seconds, 2), "output_format": "text",
            "output": "Could not grade this submission: the grader failed; please tell your "
                      "instructor.", "visibility": "visible", "stdout_visibility": "hidden",
            "tests": []}


def run(root: Path) -> int:
    """Grade ``root/submission``'s notebook into ``root/results/results.json``."""
    t0 = time.time()
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    results.chmod(0o755)
    out = results / "results.json"
    try:
        # imported here, inside the try: a grader that cannot even import still writes a
        # results.json with the reason
        from autograder.platform_common import find_notebook, grade_file, read_bundle

        course = root / "source" / "course"
        bundle = read_bundle(course)
        hidden = bundle.get("settings", {}).get("hidden_tests", "after_published")
        notebook, note = find_notebook(root / "submission", bundle["stem"])
        # the fallback runner locks these before any student code runs: the bundle (solutions,
        # hidden tests, the real course_lib) and Gradescope's submission metadata (earlier
        # submissions' scores and results, hidden feedback included)
        graded = grade_file(course, bundle, notebook, missing_reason=note,
                            lock=[root / "source", root / "submission_metadata.json"])
        if notebook is not None and note:
            graded.result.notes.insert(0, note)
        graded.seconds = time.time() - t0
        data = results_json(graded, hidden)
    except BaseException as err:  # noqa: BLE001 - a results.json, never a harness crash
        traceback.print_exc()  # stdout_visibility "hidden": the instructor's log only
        print(f"the grader failed: {type(err).__name__}: {str(err)[:300]}")
        data = _failure(time.time() - t0)
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"results.json: {total_score(data):g} points in {data['execution_time']:g} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="grade /autograder/submission (inside Gradescope)")
    p.add_argument("--root", type=Path, default=Path("/autograder"))
    args = parser.parse_args(argv)
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
