"""The questions' answers as the grader reads them: from the source notebooks' hidden tests.

course_lib does not ship them (a question's registry entry has no reference); a test that grades
a question in the kernel gives :func:`grading.check`'s ``answer`` from here, as the hidden test
cell does.
"""

from __future__ import annotations

from functools import cache

from autograder.chapter_spec import load_chapter_spec
from coursebook.chapters import all_chapters


@cache
def notebook_answers() -> dict[str, str]:
    """``exercise id -> letter`` of every question of every chapter's source notebook."""
    out: dict[str, str] = {}
    for chapter in all_chapters():
        out.update(load_chapter_spec(chapter.slug, chapter.exercises, chapter.source).answers)
    return out


def answer(exercise_id: str) -> str | None:
    """The answer a question's hidden test gives (``None`` for an exercise that is no question)."""
    return notebook_answers().get(exercise_id)
