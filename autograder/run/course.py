"""What the sandbox reads: the stripped course_lib and this grading run's hidden inputs.

The sandbox's course_lib has no exercise module and no body of any exercise's answer
(:mod:`autograder.strip`); its read-only ``grading-inputs/`` holds every hidden case's inputs,
built by the trusted judge with a secret drawn here, at the start of the run, and never passed
to a sandbox: nobody can know the hidden inputs before the run.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from autograder.chapter_spec import ChapterSpec
from autograder.judge import Judge
from autograder.run.sandbox import INPUTS_FOLDER
from autograder.strip import answers_to_strip, build_sandbox_course_lib, sandbox_modules
from course_lib import grading
from course_lib.exercises._common import using_secret


def prepare_sandbox_course(spec: ChapterSpec, course_dir: Path, judge: Judge) -> None:
    """Write course_lib for the sandbox (no exercise module, no answer's body) and the hidden
    inputs of this run under ``course_dir``.

    Args:
        spec: the chapter whose exercises are graded.
        course_dir: the folder bound read-only into every sandbox.
        judge: the trusted judge; it remembers the inputs it wrote, to compute the references.
    """
    inputs = course_dir / INPUTS_FOLDER
    if inputs.exists():
        shutil.rmtree(inputs)
    exercise_ids = list(grading.chapter_exercises(spec.exercise_chapter))
    # This run's secret, drawn here and never passed to a sandbox (--clearenv): nobody can know
    # the hidden inputs before the run.
    with using_secret(secrets.token_hex(16)):
        judge.write_inputs(inputs, exercise_ids)
    values = [case for eid in exercise_ids for case in judge.inputs(eid)]
    build_sandbox_course_lib(course_dir, answers_to_strip(spec.exercise_chapter),
                             sandbox_modules(spec.exercise_chapter, values))
    for path in [inputs, *inputs.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
