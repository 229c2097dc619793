"""``python -m autograder prairielearn CHAPTER --out DIR``: a PrairieLearn externally graded
question.

``DIR/<chapter>/`` is a question directory (copy it under ``questions/`` of the PrairieLearn
course):

* ``info.json``: ``gradingMethod: "External"`` with ``externalGradingOptions`` (``image``: the
  grader image, ``entrypoint: "/grade/tests/run.sh"``, ``timeout`` in seconds);
* ``question.html``: the task and a ``pl-file-upload`` of the notebook, the grader's results;
* ``tests/``: ``run.sh`` (the entrypoint) and the bundle (:mod:`autograder.platform_common`:
  ``course/``, ``bundle.json``, ``setup.sh``); PrairieLearn mounts it at ``/grade/tests``;
* ``clientFilesQuestion/<slug>.ipynb``: the blank release, to download;

and ``DIR/<chapter>-grader-image/Dockerfile`` builds the grader image (``setup.sh`` into
``/opt/course-venv``) that ``info.json`` names.

PrairieLearn's layout in the grader container: ``/grade/data/data.json`` (the submission's
data), ``/grade/student/`` (the uploaded files), ``/grade/tests/``, and the entrypoint writes
``/grade/results/results.json``: ``gradable``, ``score`` in [0, 1], ``message``, ``output``,
``format_errors`` (a file that cannot be graded: ``gradable: false`` and the reason, so the
student's attempt is not counted), ``tests[]`` with ``name``, ``description``, ``points``,
``max_points``, ``message``, ``output``. :data:`RESULTS_SCHEMA` checks it in the tests.
"""

from __future__ import annotations

import argparse
import html
import json
import shutil
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: platform_common is imported inside run()'s try
    from autograder.platform_common import Graded
    from coursebook.chapters import Chapter

RUN_SH = r"""#!/usr/bin/env bash
# PrairieLearn's external grader runs this (the question's info.json names it) in a container
# of the grader image; it never exits without /grade/results/results.json.
ROOT="${GRADE_ROOT:-/grade}"
VENV="${COURSE_VENV:-/opt/course-venv}"
mkdir -p "$ROOT/results"
PYTHONPATH="$ROOT/tests/course" "$VENV/bin/python" -s -m autograder.prairielearn run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  msg="The grader could not run (exit status $status): please tell your instructor."
  printf '{"gradable": false, "score": 0, "format_errors": ["%s"]}\n' "$msg" \
    > "$ROOT/results/results.json"
fi
exit 0
"""

DOCKERFILE = """# The grader image of {chapter}'s PrairieLearn question (course commit {commit}).
# docker build -t {image} . && docker push {image}
FROM ubuntu:24.04
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \\
      python3 python3-venv bubblewrap util-linux ca-certificates && rm -rf /var/lib/apt/lists/*
COPY setup.sh requirements-grading.txt constraints.txt /setup/
COPY course /setup/course
RUN bash /setup/setup.sh && rm -rf /setup /root/.cache/pip
"""

#: PrairieLearn's external grader results.json, as its documentation describes it (written
#: from that description).
RESULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["gradable"],
    "properties": {
        "gradable": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "format_errors": {"type": "array", "items": {"type": "string"}},
        "images": {"type": "array"},
        "tests": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "points", "max_points"],
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "points": {"type": "number", "minimum": 0},
                "max_points": {"type": "number", "minimum": 0},
                "message": {"type": "string"},
                "output": {"type": "string"},
                "images": {"type": "array"},
            },
        }},
    },
    "if": {"properties": {"gradable": {"const": True}}},
    "then": {"required": ["score", "tests"]},
    "else": {"required": ["format_errors"]},
}


def build(chapter: Chapter, out: Path, allow_dirty: bool = False, image: str | None = None,
          timeout: int = 600, settings: dict | None = None) -> Path:
    """Write the question directory ``out/<chapter>/`` and ``out/<chapter>-grader-image/``."""
    from autograder.platform_common import write_bundle  # see run()

    qdir = out / chapter.slug
    if qdir.exists():
        shutil.rmtree(qdir)
    tests = qdir / "tests"
    info = write_bundle(chapter, tests, allow_dirty, settings)
    run = tests / "run.sh"
    run.write_text(RUN_SH)
    run.chmod(0o755)
    image = image or f"attention-course/grader:{info['commit'][:12]}"
    (qdir / "clientFilesQuestion").mkdir()
    if chapter.release.exists():
        shutil.copy2(chapter.release, qdir / "clientFilesQuestion" / chapter.release.name)
    qid = uuid.uuid5(uuid.NAMESPACE_URL, f"attention-course/{chapter.slug}")
    (qdir / "info.json").write_text(json.dumps({
        "uuid": str(qid), "title": f"{chapter.slug}: the notebook's exercises",
        "topic": chapter.slug, "tags": ["notebook", "autograded"], "type": "v3",
        "singleVariant": True, "gradingMethod": "External",
        "externalGradingOptions": {"enabled": True, "image": image,
                                   "entrypoint": "/grade/tests/run.sh", "timeout": int(timeout)},
    }, indent=2) + "\n")
    name = html.escape(chapter.release.name)
    (qdir / "question.html").write_text(f"""<pl-question-panel>
  <p>Work through the exercises of <b>{html.escape(chapter.slug)}</b> in the notebook
  (<a href="{{{{options.client_files_question_url}}}}/{name}">download the blank notebook</a>,
  or use your Colab copy), then upload it here as <code>{name}</code> (rename a Colab download
  such as <code>{html.escape(chapter.stem)} (1).ipynb</code>). Each exercise is graded by hidden
  tests; a file that cannot be read is returned without using an attempt.</p>
  <pl-file-upload file-names="{name}"></pl-file-upload>
</pl-question-panel>

<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
""")
    img = out / f"{chapter.slug}-grader-image"
    if img.exists():
        shutil.rmtree(img)
    img.mkdir(parents=True)
    for name_ in ("setup.sh", "requirements-grading.txt", "constraints.txt"):
        shutil.copy2(tests / name_, img / name_)
    shutil.copytree(tests / "course", img / "course")
    (img / "Dockerfile").write_text(DOCKERFILE.format(chapter=chapter.slug,
                                                      commit=info["commit"][:12], image=image))
    return qdir


def results_json(graded: Graded) -> dict[str, Any]:
    """PrairieLearn's results.json of one graded file (:class:`platform_common.Graded`)."""
    from autograder.platform_common import feedback_text, general_text  # see run()

    r, spec = graded.result, graded.spec
    if r.status != "graded":
        return {"gradable": False, "score": 0.0, "format_errors": [r.reason],
                "message": general_text(graded)}
    tests = []
    for ex in spec.exercises:
        er = r.exercises[ex.exercise_id]
        msgs = er.messages
        tests.append({"name": ex.name, "description": f"{ex.exercise_id} (hidden tests)",
                      "points": float(er.points), "max_points": float(ex.points),
                      "message": "passed" if er.status == "passed" else (
                          msgs[0] if msgs else er.status),
                      "output": feedback_text(r, ex.exercise_id)})
    total, top = float(r.total), float(r.max_total) or 1.0
    return {"gradable": True, "score": min(1.0, max(0.0, total / top)),
            "message": general_text(graded), "output": "", "tests": tests}


def run(root: Path) -> int:
    """Grade ``root/student``'s notebook into ``root/results/results.json``."""
    t0 = time.time()
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    results.chmod(0o755)
    out = results / "results.json"
    try:
        # imported here, inside the try: a grader that cannot even import still writes a
        # results.json with the reason
        from autograder.platform_common import find_notebook, grade_file, read_bundle

        course = root / "tests" / "course"
        bundle = read_bundle(course)
        notebook, note = find_notebook(root / "student", bundle["stem"])
        graded = grade_file(course, bundle, notebook, missing_reason=note,
                            lock=[root / "tests", root / "data"])
        if notebook is not None and note:
            graded.result.notes.insert(0, note)
        graded.seconds = time.time() - t0
        data = results_json(graded)
    except BaseException as err:  # noqa: BLE001 - a results.json, never a harness crash
        traceback.print_exc()
        data = {"gradable": False, "score": 0.0, "format_errors": [
            f"the grader failed ({type(err).__name__}: {str(err)[:300]}); please tell your "
            "instructor"]}
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"results.json: gradable {data['gradable']}, score {data['score']:g} "
          f"in {time.time() - t0:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.prairielearn")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="grade /grade/student (inside PrairieLearn's grader)")
    p.add_argument("--root", type=Path, default=Path("/grade"))
    args = parser.parse_args(argv)
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
