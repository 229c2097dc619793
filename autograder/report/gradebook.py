"""nbgrader's gradebook (``gradebook.db``), written only by the main process after grading."""

from __future__ import annotations

import warnings
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.chapter_spec import ChapterSpec
from autograder.results import GradeResult


def write_gradebook(db: Path, assignment: str, notebook: str, chapter: ChapterSpec,
                    results: list[GradeResult]) -> None:
    """Record every student's auto scores in nbgrader's gradebook.

    Args:
        db: the SQLite file.
        assignment: nbgrader's assignment id, the chapter's slug (``01-seq2seq``).
        notebook: the notebook's name without ``.ipynb`` (``seq2seq``).
        chapter: the chapter's exercises (one grade cell each).
        results: every student's result.
    """
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{db}") as gb:
        warnings.simplefilter("ignore")
        gb.update_or_create_assignment(assignment)
        gb.update_or_create_notebook(notebook, assignment)
        for ex in chapter.exercises:
            gb.update_or_create_grade_cell(ex.test_grade_id, notebook, assignment,
                                           max_score=ex.points, cell_type="code")
            gb.update_or_create_solution_cell(ex.solution_grade_id, notebook, assignment)
        for r in results:
            gb.update_or_create_student(r.student_id)
            gb.update_or_create_submission(assignment, r.student_id)
            for ex in chapter.exercises:
                grade = gb.find_grade(ex.test_grade_id, notebook, assignment, r.student_id)
                outcome = r.exercises.get(ex.exercise_id)
                grade.auto_score = float(outcome.points if outcome is not None else 0.0)
            gb.db.commit()
