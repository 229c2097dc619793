"""A student's feedback page: score per exercise, what failed and why, repairs, their cells.

Never included: the hidden test code, the hidden inputs, the reference outputs. Rendered from
``templates/feedback.html`` with every value escaped.
"""

from __future__ import annotations

from autograder.chapter_spec import ChapterSpec
from autograder.report.pages import render
from autograder.results import NOT_TAMPER_PROOF, GradeResult


def render_feedback(chapter: ChapterSpec, result: GradeResult) -> str:
    """The student's feedback page as HTML.

    Args:
        chapter: the chapter's exercises, in their order.
        result: the student's result.

    Returns:
        The page; an exercise without an outcome is listed as not graded.
    """
    rows = [(ex, result.exercises.get(ex.exercise_id)) for ex in chapter.exercises]
    return render("feedback.html", chapter=chapter.name, r=result, rows=rows,
                  not_tamper_proof=NOT_TAMPER_PROOF if result.engine == "nbgrader" else "")
