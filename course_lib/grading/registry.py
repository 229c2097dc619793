"""The registry: every chapter's exercises, looked up by id, and the objects that answer them.

A chapter's exercises are ``course_lib.exercises.<chapter>.EXERCISES`` (``id -> Exercise``). The
grading sandbox holds no exercise module, so there a look-up fails with a message a student can
read (:data:`course_lib.grading.guard.STRIPPED_MARKER`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from course_lib.grading.exercise import Exercise, GradingError
from course_lib.grading.guard import STRIPPED_MARKER, code_objects
from course_lib.grading.modes import grading_mode


def chapter_exercises(chapter: str) -> dict[str, Exercise]:
    """All exercises of a chapter, by id, from ``course_lib.exercises.<chapter>.EXERCISES``.

    Example:
        >>> "seq2seq.additive_score" in chapter_exercises("seq2seq")
        True
    """
    try:
        module = importlib.import_module(f"course_lib.exercises.{chapter}")
    except ModuleNotFoundError as err:
        if grading_mode() == "record":  # the grading sandbox holds no exercise module
            raise GradingError(f"the exercises of chapter {chapter!r} {STRIPPED_MARKER}: solve "
                               "the exercise with your own code") from err
        raise GradingError(f"no exercises registered for chapter {chapter!r}") from err
    exercises = getattr(module, "EXERCISES", None)
    if not isinstance(exercises, dict):
        raise GradingError(f"course_lib.exercises.{chapter} has no EXERCISES dict")
    return exercises


def get_exercise(exercise_id: str) -> Exercise:
    """Look up an exercise by id, e.g. ``get_exercise("seq2seq.additive_score")``.

    Raises:
        GradingError: naming the id when it is malformed or unknown (and the known ones).
    """
    if "." not in exercise_id:
        raise GradingError(f"exercise id {exercise_id!r} is not of the form '<chapter>.<name>'")
    exercises = chapter_exercises(exercise_id.split(".", 1)[0])
    if exercise_id not in exercises:
        known = ", ".join(sorted(exercises))
        raise GradingError(f"unknown exercise {exercise_id!r}; this chapter has: {known}")
    return exercises[exercise_id]


def exercise_chapters() -> list[str]:
    """Every chapter with an exercise module (``course_lib/exercises/<chapter>.py``), sorted.

    Example:
        >>> "seq2seq" in exercise_chapters()
        True
    """
    folder = Path(__file__).resolve().parent.parent / "exercises"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def answer_objects(chapters: Iterable[str] | None = None) -> list[tuple[Any, str]]:
    """``(object, exercise id)`` for every reference and forbidden object of ``chapters``.

    These are the course_lib objects that compute an exercise's answer: the guard fails a case
    that calls one, and the grading sandbox holds none of their bodies. ``chapters`` defaults to
    every chapter (:func:`exercise_chapters`). A question has no reference (its answer is not in
    course_lib).
    """
    out: list[tuple[Any, str]] = []
    for chapter in exercise_chapters() if chapters is None else chapters:
        for ex in chapter_exercises(chapter).values():
            objs = (ex.forbidden if ex.reference is None else (ex.reference, *ex.forbidden))
            out += [(obj, ex.id) for obj in objs]
    return out


def forbidden_code_objects(chapter: str, exercise: Exercise | None = None) -> dict[Any, str]:
    """Code objects that compute an exercise's answer, mapped to that exercise's id.

    Every chapter's references and forbidden objects, this chapter's first (so a message names
    this chapter's exercise where two share an object), less what ``exercise`` allows.
    """
    allowed = {code for obj in (exercise.allowed if exercise else ()) for code in code_objects(obj)}
    order = [chapter] + [c for c in exercise_chapters() if c != chapter]
    codes: dict[Any, str] = {}
    for obj, exercise_id in answer_objects(order):
        for code in code_objects(obj):
            if code not in allowed:
                codes.setdefault(code, exercise_id)
    return codes
