"""``python -m autograder gradescope CHAPTER --out DIR``: a Gradescope autograder zip.

``DIR/<chapter>-gradescope.zip`` holds, at its root, ``setup.sh`` (Gradescope runs it once, as
root, when it builds the image: a virtual environment at ``/opt/course-venv`` with a pinned
CPU-only torch and the grading dependencies), ``run_autograder`` (run per submission), and the
bundle (:mod:`autograder.platform_common`: ``course/`` with course_lib and the autograder at the
zip's commit, the chapter's source and release, ``bundle.json``).

Per submission Gradescope unzips the zip into ``/autograder/source``, puts the student's files in
``/autograder/submission`` and runs ``/autograder/run_autograder``, which runs
``python -m autograder.gradescope run``: it finds the ``.ipynb`` whatever its name, grades it with
the hardened engine (bubblewrap where the container lets it create namespaces, else the
fallback runner) and writes ``/autograder/results/results.json``:

* per exercise, one scored test ``"<exercise>"`` (``score``, ``max_score``, ``status``, ``output``:
  the feedback page's text for that exercise) with ``visibility`` ``after_published`` (the
  hidden tests' verdict: after the instructor publishes the grades), and one unscored test
  ``"<exercise>: visible tests"`` (``max_score`` 0) with ``visibility`` ``visible``: what the
  notebook's own visible tests printed, at once;
* ``score`` (the total), ``execution_time``, ``output`` (could-not-grade reason, repairs);
* a file that cannot be graded (none submitted, truncated, not a notebook) gives every test 0
  with the reason, and so does any error of the grader itself: ``run`` never exits without a
  results.json.

The layout Gradescope documents for results.json is the one written here (fields ``score``,
``execution_time``, ``output``, ``output_format``, ``visibility``, ``stdout_visibility``,
``extra_data``, ``tests[]`` with ``score``, ``max_score``, ``status``, ``name``, ``number``,
``output``, ``output_format``, ``visibility``); :data:`RESULTS_SCHEMA` checks it in the tests.
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
PYTHONPATH="$ROOT/source/course" "$VENV/bin/python" -s -m autograder.gradescope run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  msg="The autograder could not run (exit status $status): please tell your instructor."
  printf '{"score": 0, "output": "%s", "tests": []}\n' "$msg" > "$ROOT/results/results.json"
fi
exit 0
"""

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")

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
          settings: dict | None = None) -> Path:
    """Write ``out/<chapter>-gradescope.zip``; return its path."""
    from autograder.platform_common import write_bundle  # see run()

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


def results_json(graded: Graded, visibility: str = "after_published") -> dict[str, Any]:
    """Gradescope's results.json of one graded file (:class:`platform_common.Graded`)."""
    from autograder.platform_common import (  # see run()
        feedback_text,
        general_text,
        visible_test_log,
    )

    r, spec = graded.result, graded.spec
    tests = []
    for i, ex in enumerate(spec.exercises, 1):
        er = r.exercises[ex.exercise_id]
        points = float(er.points)
        tests.append({"name": ex.name, "number": f"{i}.1", "score": points,
                      "max_score": float(ex.points),
                      "status": "passed" if er.status == "passed" else "failed",
                      "output": feedback_text(r, ex.exercise_id), "output_format": "text",
                      "visibility": visibility})
        if r.status == "graded":
            ok, text = visible_test_log(r, ex.exercise_id)
            tests.append({"name": f"{ex.name}: visible tests", "number": f"{i}.0",
                          "score": 0.0, "max_score": 0.0, "status": "passed" if ok else "failed",
                          "output": text, "output_format": "text", "visibility": "visible"})
        else:
            tests[-1]["visibility"] = "visible"  # nothing hidden to wait for: the reason, now
    return {"score": float(r.total), "execution_time": round(graded.seconds, 2),
            "output": general_text(graded), "output_format": "text", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"chapter": graded.bundle.get("chapter"),
                           "commit": graded.bundle.get("commit"), "runner": graded.runner,
                           "file": r.file, "sha256": r.sha256,
                           "max_total": float(r.max_total), "status": r.status,
                           "peak_rss_mb": graded.memory}}


def _failure(reason: str, seconds: float) -> dict[str, Any]:
    return {"score": 0.0, "execution_time": round(seconds, 2), "output_format": "text",
            "output": f"Could not grade this submission: {reason}", "visibility": "visible",
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
        notebook, note = find_notebook(root / "submission", bundle["stem"])
        graded = grade_file(course, bundle, notebook, missing_reason=note,
                            lock=[root / "source"])
        if notebook is not None and note:
            graded.result.notes.insert(0, note)
        graded.seconds = time.time() - t0
        data = results_json(graded, bundle.get("settings", {}).get("visibility",
                                                                   "after_published"))
    except BaseException as err:  # noqa: BLE001 - a results.json, never a harness crash
        traceback.print_exc()
        data = _failure(f"the grader failed ({type(err).__name__}: {str(err)[:300]}); "
                        "please tell your instructor", time.time() - t0)
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"results.json: {data['score']:g} points in {data['execution_time']:g} s")
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
