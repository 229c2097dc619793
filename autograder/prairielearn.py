"""``python -m autograder prairielearn CHAPTER --out DIR --image IMAGE``: a PrairieLearn
externally graded question.

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

What PrairieLearn documents and this module relies on (docs.prairielearn.com; the
repository's ``docs/externalGrading.md``, ``docs/dockerImages.md``,
``docs/elements/pl-file-upload.md``):

* ``externalGradingOptions.image`` is required ("any image specification that is understood by
  ``docker pull``") and must be public on Docker Hub, ``ghcr.io``, ``quay.io``,
  ``registry.gitlab.com`` or ``public.ecr.aws``, without a port (:data:`REGISTRIES`): there is
  no image anyone could pull by default, so ``--image`` is required and checked;
* ``timeout`` "cannot exceed 600 seconds (10 minutes)" (:data:`MAX_TIMEOUT`): a larger one is
  refused, and so is one that leaves the notebook's own time limit no room;
* images must be built for ``linux/amd64`` (``docker build --platform linux/amd64``; Apple
  silicon builds ``linux/arm64`` by default), pushed, then synced: the course's **Sync** page,
  **Docker images**, **Sync** for the image;
* ``pl-file-upload``'s ``file-patterns`` takes fnmatch globs, exactly one file per pattern:
  the question asks for ``*<stem>*.ipynb`` (:func:`upload_pattern`), so Colab's downloads
  (``seq2seq (1).ipynb``, ``Copy of seq2seq.ipynb``) are accepted as they are, and the grader
  takes the uploaded file that matches the same pattern (``bundle.json``'s
  ``settings.upload_pattern``); uploads are capped at 5 MB per answer.

PrairieLearn's layout in the grader container: ``/grade/data/data.json`` (the submission's
data), ``/grade/student/`` (the uploaded files), ``/grade/tests/``, and the entrypoint writes
``/grade/results/results.json``: ``gradable``, ``score`` in [0, 1], ``message``, ``output``,
``format_errors`` (a file that cannot be graded: ``gradable: false`` and the reason, so the
student's attempt is not counted), ``tests[]`` with ``name``, ``description``, ``points``,
``max_points``, ``message``, ``output``. :data:`RESULTS_SCHEMA` checks it in the tests.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import html
import json
import os
import re
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
COURSE_PLATFORM_CONTAINER=1 PYTHONPATH="$ROOT/tests/course" \
  "$VENV/bin/python" -s -m autograder.prairielearn run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  msg="The grader could not run (exit status $status): please tell your instructor."
  printf '{"gradable": false, "score": 0, "format_errors": ["%s"]}\n' "$msg" \
    > "$ROOT/results/results.json"
fi
exit 0
"""

DOCKERFILE = """# The grader image of {chapter}'s PrairieLearn question (course commit {commit}).
# Build it for linux/amd64 (PrairieLearn runs only that; Apple silicon builds arm64 by default),
# push it, then in PrairieLearn: the course's Sync page, "Docker images", Sync for {image}.
#   docker build --platform linux/amd64 -t {image} .
#   docker push {image}
FROM ubuntu:24.04
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \\
      python3 python3-venv bubblewrap util-linux ca-certificates && rm -rf /var/lib/apt/lists/*
COPY setup.sh requirements-grading.txt constraints.txt /setup/
COPY course /setup/course
RUN bash /setup/setup.sh && rm -rf /setup /root/.cache/pip
"""

#: PrairieLearn's ceiling on ``externalGradingOptions.timeout`` (docs/externalGrading.md: "This
#: value cannot exceed 600 seconds (10 minutes)").
MAX_TIMEOUT = 600
#: Seconds the grading timeout keeps beyond the notebook's own limit (the container's start,
#: reading the bundle, every reference output).
TIMEOUT_MARGIN = 60
#: The registries PrairieLearn pulls grader images from (docs/dockerImages.md, "Supported
#: registries"); Docker Hub names have no host.
REGISTRIES = ("docker.io", "index.docker.io", "registry-1.docker.io", "ghcr.io", "quay.io",
              "registry.gitlab.com", "public.ecr.aws")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"(?:(?P<host>[A-Za-z0-9.-]+\.[A-Za-z0-9.-]+(?::[0-9]+)?|localhost"
                    rf"(?::[0-9]+)?)/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
                    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
                    r"(?:@sha256:[0-9a-f]{64})?")


def check_image(image: str | None) -> str:
    """``image`` if PrairieLearn can pull it, else a :class:`BundleError` that says why.

    Example:
        >>> check_image("yourorg/attention-grader:2026a")
        'yourorg/attention-grader:2026a'
        >>> check_image("registry.example.edu:5000/grader:1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        autograder.platform_common.BundleError: ... PrairieLearn pulls only from Docker Hub ...
    """
    from autograder.platform_common import BundleError  # see run()

    if not image:
        raise BundleError("--image is required: the grader image info.json names, such as "
                          "yourorg/attention-grader:2026a (build it from the question's "
                          "-grader-image/ folder with docker build --platform linux/amd64, "
                          "push it to Docker Hub or another registry PrairieLearn pulls from, "
                          "then Sync it on the course's Sync page, under Docker images)")
    m = _IMAGE.fullmatch(image)
    if m is None:
        raise BundleError(f"--image {image!r} is not an image name docker can pull "
                          "(lower-case yourorg/name:tag)")
    host = m.group("host")
    if host is not None and host.lower() not in REGISTRIES:
        raise BundleError(f"--image {image}: PrairieLearn pulls only from Docker Hub "
                          "(yourorg/name:tag), ghcr.io, quay.io, registry.gitlab.com or "
                          "public.ecr.aws, without a port")
    return image


def check_timeout(timeout: int, notebook_timeout: float) -> int:
    """``timeout`` if PrairieLearn accepts it and it leaves the notebook its time, else a
    :class:`BundleError` that says why.

    Example:
        >>> check_timeout(600, 300.0)
        600
    """
    from autograder.platform_common import BundleError  # see run()

    if not 1 <= timeout <= MAX_TIMEOUT:
        raise BundleError(f"--timeout {timeout}: PrairieLearn's external grading timeout is "
                          f"1 to {MAX_TIMEOUT} seconds (it cannot exceed 10 minutes)")
    if timeout < notebook_timeout + TIMEOUT_MARGIN:
        raise BundleError(f"--timeout {timeout} leaves no room for the notebook's own limit "
                          f"(--notebook-timeout {notebook_timeout:g} s plus {TIMEOUT_MARGIN} s "
                          "to start and compute the references): raise --timeout (at most "
                          f"{MAX_TIMEOUT}) or lower --notebook-timeout")
    return timeout


def upload_pattern(stem: str) -> tuple[str, str]:
    """``(attribute, glob)``: the ``file-patterns`` value of the question's upload (special
    characters escaped with a backslash, as PrairieLearn asks) and the same pattern as an
    :mod:`fnmatch` glob for the grader.

    Example:
        >>> attr, pattern = upload_pattern("seq2seq")
        >>> attr, fnmatch.fnmatchcase("seq2seq (1).ipynb", pattern)
        ('*seq2seq*.ipynb', True)
    """
    escaped = re.sub(r"([\\*?\[\],])", r"\\\1", stem)
    return f"*{escaped}*.ipynb", f"*{glob.escape(stem)}*.ipynb"


def find_upload(folder: Path, pattern: str) -> Path | None:
    """The one regular file directly in ``folder`` (PrairieLearn's ``/grade/student``) whose
    name matches ``pattern`` (case-sensitive, as ``file-patterns`` is), or ``None`` when none or
    several do; links are never followed.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "seq2seq (1).ipynb").write_text("{}")
        >>> find_upload(d, upload_pattern("seq2seq")[1]).name
        'seq2seq (1).ipynb'
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    found = [Path(e.path) for e in entries
             if e.is_file(follow_symlinks=False) and fnmatch.fnmatchcase(e.name, pattern)]
    return found[0] if len(found) == 1 else None


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
          timeout: int = MAX_TIMEOUT, settings: dict[str, Any] | None = None) -> Path:
    """Write the question directory ``out/<chapter>/`` and ``out/<chapter>-grader-image/``.

    Raises:
        platform_common.BundleError: no ``image`` or one PrairieLearn cannot pull
            (:func:`check_image`), a ``timeout`` over PrairieLearn's 600 s or under the
            notebook's own limit (:func:`check_timeout`), or a dirty tree without
            ``allow_dirty``.
    """
    from autograder.platform_common import write_bundle  # see run()

    image = check_image(image)
    timeout = check_timeout(int(timeout), float((settings or {}).get("notebook_timeout", 300.0)))
    attribute, pattern = upload_pattern(chapter.stem)
    qdir = out / chapter.slug
    if qdir.exists():
        shutil.rmtree(qdir)
    tests = qdir / "tests"
    info = write_bundle(chapter, tests, allow_dirty, {**(settings or {}),
                                                       "upload_pattern": pattern})
    run = tests / "run.sh"
    run.write_text(RUN_SH)
    run.chmod(0o755)
    (qdir / "clientFilesQuestion").mkdir()
    if chapter.release.exists():
        shutil.copy2(chapter.release, qdir / "clientFilesQuestion" / chapter.release.name)
    qid = uuid.uuid5(uuid.NAMESPACE_URL, f"attention-course/{chapter.slug}")
    (qdir / "info.json").write_text(json.dumps({
        "uuid": str(qid), "title": f"{chapter.slug}: the notebook's exercises",
        "topic": chapter.slug, "tags": ["notebook", "autograded"], "type": "v3",
        "singleVariant": True, "gradingMethod": "External",
        "externalGradingOptions": {"enabled": True, "image": image,
                                   "entrypoint": "/grade/tests/run.sh", "timeout": timeout},
    }, indent=2) + "\n")
    name = html.escape(chapter.release.name)
    stem = html.escape(chapter.stem)
    (qdir / "question.html").write_text(f"""<pl-question-panel>
  <p>Work through the exercises of <b>{html.escape(chapter.slug)}</b> in the notebook
  (<a href="{{{{options.client_files_question_url}}}}/{name}">download the blank notebook</a>,
  or use your Colab copy), then upload it here: one <code>.ipynb</code> file whose name holds
  <code>{stem}</code>, such as <code>{name}</code> or Colab's <code>{stem} (1).ipynb</code>, at
  most 5 MB (clear large outputs first). Each exercise is graded by hidden tests; a file that
  cannot be read is returned without using an attempt.</p>
  <pl-file-upload file-patterns="{html.escape(attribute)}"></pl-file-upload>
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
        # the file the question's file-patterns accepted; else any .ipynb (an older question)
        pattern = bundle.get("settings", {}).get("upload_pattern")
        uploaded = find_upload(root / "student", pattern) if pattern else None
        notebook, note = ((uploaded, "") if uploaded is not None
                          else find_notebook(root / "student", bundle["stem"]))
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
