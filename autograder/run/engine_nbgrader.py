"""``--engine nbgrader``: nbgrader's own autograde and generate_feedback (the baseline).

The submissions are put in a throwaway nbgrader course directory (``--out``/work/nbgrader-course)
under the name nbgrader expects (``submitted/<student>/<chapter>/<slug>.ipynb``), the assignment
is generated from the source into that course's gradebook, and nbgrader's ``Autograde`` and
``GenerateFeedback`` converters run through :class:`nbgrader.apps.NbGraderAPI`, in this process,
one submission after another. The only changes to stock behaviour: a 600 s cell timeout (the
default 30 s kills a chapter's full-mode demos), and feedback with the hidden tests cleared
(``ClearHiddenTests``; stock nbgrader prints them verbatim).

Student code runs unsandboxed, in the same kernel as the tests: this engine is the baseline the
hardened engine is measured against, not a defence (see autograder/README.md). Its grades are not
tamper-proof (a notebook can replace ``grading.check``, or switch the reference guard off and call
the reference), and it says so (:data:`NOT_TAMPER_PROOF`): on stderr when grading starts, in the
closing summary, as a banner in summary.html and in every feedback page.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat
from markupsafe import escape
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from tqdm import tqdm

import course_lib
from autograder.chapter_spec import ChapterSpec
from autograder.extra_exercises import EXTRA_EXERCISES_ENV
from autograder.nbgrader_setup import nbgrader_config, setup_alembic
from autograder.results import NOT_TAMPER_PROOF, ExerciseOutcome, GradeResult
from coursebook.chapters import Chapter


def add_banner(page: str) -> str:
    """An HTML page (nbgrader's feedback) with :data:`NOT_TAMPER_PROOF` at the top of its body.

    Example:
        >>> add_banner("<html><body><p>x</p></body></html>").count("NOT tamper-proof")
        1
    """
    banner = ('<div role="note" style="border:2px solid #a40e26;color:#a40e26;padding:.6rem;'
              f'margin:.6rem 0"><b>{escape(NOT_TAMPER_PROOF)}</b></div>')
    body = re.search(r"<body[^>]*>", page, re.I)
    return page[:body.end()] + banner + page[body.end():] if body else banner + page


def _full_course_lib_with_extras() -> str | None:
    """A PYTHONPATH entry holding course_lib plus the test-only exercise modules, if any."""
    extra = os.environ.get(EXTRA_EXERCISES_ENV)
    if not extra:
        return None
    dest = Path(tempfile.mkdtemp(prefix="autograder-courselib-"))
    shutil.copytree(Path(course_lib.__file__).parent, dest / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in Path(extra).glob("*.py"):
        shutil.copyfile(f, dest / "course_lib" / "exercises" / f.name)
    return str(dest)


def grade_with_nbgrader(chapter: Chapter, spec: ChapterSpec,
                        todo: list[tuple[GradeResult, NotebookNode]],
                        out: Path, progress: bool = True) -> list[GradeResult]:
    """Autograde and generate feedback for each ``(result, notebook)`` with stock nbgrader.

    Its grades are not tamper-proof (:data:`NOT_TAMPER_PROOF`, printed on stderr first).
    """
    print(f"warning: {NOT_TAMPER_PROOF}", file=sys.stderr)
    setup_alembic()
    if not todo:
        return []
    root = out / "work" / "nbgrader-course"
    if root.exists():
        shutil.rmtree(root)
    (root / "source" / chapter.slug).mkdir(parents=True)
    shutil.copyfile(chapter.source, root / "source" / chapter.slug / f"{chapter.stem}.ipynb")
    config = nbgrader_config(root, timeout=600)
    config.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades", "nbgrader.preprocessors.ClearHiddenTests",
        "nbgrader.preprocessors.CSSHTMLHeaderPreprocessor"]
    config.ClearHiddenTests.enforce_metadata = False
    extra_path = _full_course_lib_with_extras()
    old_pp = os.environ.get("PYTHONPATH")
    if extra_path:
        os.environ["PYTHONPATH"] = extra_path + (os.pathsep + old_pp if old_pp else "")
    try:
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        gen = api.generate_assignment(chapter.slug, force=True, create=True)
        if not gen.get("success"):
            raise RuntimeError(f"nbgrader generate_assignment failed: {gen.get('error')}")
        done = []
        for result, nb in tqdm(todo, desc=f"nbgrader autograde {chapter.slug}", unit="nb",
                               file=sys.stderr, disable=not progress):
            start = time.time()
            try:
                _grade_one(api, config, chapter, spec, root, result, nb)
            except Exception as err:  # noqa: BLE001 - one submission never stops the batch
                result.fail(f"grader error: {type(err).__name__}: {str(err)[:300]}")
            result.seconds = round(time.time() - start, 2)
            done.append(result)
        return done
    finally:
        if extra_path:
            if old_pp is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old_pp
            shutil.rmtree(extra_path, ignore_errors=True)


def _grade_one(api, config, chapter: Chapter, spec: ChapterSpec, root: Path,
               result: GradeResult, nb: NotebookNode) -> None:
    """Autograde one submission and generate its feedback (fills ``result`` in place)."""
    sid = result.student_id
    sub = root / "submitted" / sid / chapter.slug
    sub.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, sub / f"{chapter.stem}.ipynb")
    res = api.autograde(chapter.slug, sid, force=True, create=True)
    if not res.get("success"):
        err = (res.get("error") or "").strip().splitlines()
        log = (res.get("log") or "").strip().splitlines()
        why = next((line for line in reversed(log) if "ERROR" in line), None) \
            or (err[-1] if err else "unknown error")
        result.fail(f"nbgrader autograde failed: {why}")
    else:
        with warnings.catch_warnings(), Gradebook(config.CourseDirectory.db_url) as gb:
            warnings.simplefilter("ignore")
            for ex in spec.exercises:
                try:
                    grade = gb.find_grade(ex.test_grade_id, chapter.stem, chapter.slug, sid)
                    pts = float(grade.score)
                except MissingEntry:
                    pts = 0.0
                result.exercises[ex.exercise_id] = ExerciseOutcome(
                    ex.exercise_id, pts, ex.points, "passed" if pts >= ex.points else "failed")
        fb = api.generate_feedback(chapter.slug, sid, force=True)
        html = root / "feedback" / sid / chapter.slug / f"{chapter.stem}.html"
        if fb.get("success") and html.exists():
            html.write_text(add_banner(html.read_text(encoding="utf-8", errors="replace")),
                            encoding="utf-8")
            result.nbgrader_feedback = str(html)
