"""Every chapter's questions, checked the same way.

A question is one :class:`course_lib.grading.Question` declaration (choices and a hint); its
answer is written only in the source notebook's hidden test, ``grading.check(id, fn,
answer="<letter>")``. Here: every hidden test gives an answer among the choices the statement
offers; the notebook's solution passes; a wrong letter reads the hint and never the answer; the
answer is nowhere in course_lib (the package students install) nor in the grading sandbox's copy
of it; the hardened grader keeps it on the trusted side.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

import course_lib
from autograder.chapter_spec import CHECK_RE, load_chapter_spec, without_answer
from autograder.judge import Judge
from autograder.strip import answers_to_strip, build_sandbox_course_lib
from course_lib import grading
from coursebook.chapters import all_chapters
from tests.conftest import load, release_notebook, solution
from tests.questions import answer, notebook_answers

CHAPTERS = {c.exercises: c for c in all_chapters()}
EXERCISES = [ex for chapter in grading.exercise_chapters()
             for ex in grading.chapter_exercises(chapter).values()]
QUESTIONS = [ex for ex in EXERCISES if isinstance(ex, grading.Question)]
IDS = [ex.id for ex in QUESTIONS]


def _grade(ex: grading.Exercise, fn: object) -> str:
    results = grading.evaluate(ex.id, fn, answer(ex.id))  # type: ignore[arg-type]
    return grading.format_failures(ex.id, results) or ""


def test_every_one_letter_exercise_is_a_question_declaration() -> None:
    assert len(QUESTIONS) >= 9
    hand_rolled = [ex.id for ex in EXERCISES if ex.cases is grading.answer_case
                   and not isinstance(ex, grading.Question)]
    assert hand_rolled == []
    for ex in QUESTIONS:
        assert ex.reference is None and ex.slips == () and ex.call is grading.choice


def test_only_questions_get_an_answer_from_their_hidden_test() -> None:
    assert sorted(notebook_answers()) == sorted(IDS)


@pytest.mark.parametrize("ex", QUESTIONS, ids=IDS)
def test_the_statement_offers_exactly_the_choices(ex: grading.Question) -> None:
    cells = load(release_notebook(CHAPTERS[ex.chapter].slug))["cells"]
    (k,) = [k for k, c in enumerate(cells)
            if c["metadata"].get("nbgrader", {}).get("grade_id") == ex.name]
    statement = "".join(cells[k - 1]["source"])  # the markdown cell above the solution
    offered = "".join(re.findall(r"^- \(([a-z])\)", statement, flags=re.M))
    assert offered == ex.choices
    assert answer(ex.id) in ex.choices


@pytest.mark.parametrize("ex", QUESTIONS, ids=IDS)
def test_the_notebook_solution_passes_whatever_its_case_and_spacing(ex: grading.Question) -> None:
    fn = solution(CHAPTERS[ex.chapter].slug, ex.name)
    assert _grade(ex, fn) == ""
    letter = fn()
    assert _grade(ex, lambda: f" {letter.upper()} ") == ""


@pytest.mark.parametrize("ex", QUESTIONS, ids=IDS)
def test_a_wrong_letter_reads_the_hint_and_never_the_answer(ex: grading.Question) -> None:
    right = answer(ex.id)
    assert right is not None
    option = rf"(?<![\w)])\([{ex.choices}]\)|['\"][{ex.choices}]['\"]"  # "(b)", "'b'"
    assert not re.search(option, ex.hint), "the hint names no letter"
    for letter in ex.choices.replace(right, ""):
        message = _grade(ex, lambda letter=letter: letter)
        assert ex.hint in message
        for leak in (f"'{right}'", f'"{right}"', f"({right})", f"expected {right}"):
            assert leak not in message, f"the feedback on {letter!r} names the answer"


@pytest.mark.parametrize("ex", QUESTIONS, ids=IDS)
def test_other_answers_are_told_what_form_to_take(ex: grading.Question) -> None:
    assert "answer with one of the letters" in _grade(ex, lambda: "z")
    for wrong in (lambda: None, lambda: "ab", lambda: 2):
        assert "return one letter as a string" in _grade(ex, wrong)


def test_a_question_graded_without_its_answer_is_a_clear_error() -> None:
    ex = QUESTIONS[0]
    with pytest.raises(grading.GradingError, match="its hidden test gives the answer"):
        grading.evaluate(ex.id, lambda: "a")
    with pytest.raises(grading.GradingError, match="must be one of the letters"):
        grading.evaluate(ex.id, lambda: "a", answer="z")
    with pytest.raises(grading.GradingError, match="is not a question"):
        grading.evaluate("seq2seq.masked_softmax", lambda scores, mask: scores, answer="a")


# The answer is not shipped ----------------------------------------------------------------------


def answer_leaks(root: Path) -> list[str]:
    """Where a question's answer could be read in the package at ``root``: a function named as a
    question's, a hidden call with an answer, or a no-argument lambda returning a letter."""
    names = {ex.name for ex in QUESTIONS}
    leaks = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        for match in CHECK_RE.finditer(text):
            if match[3]:
                leaks.append(f"{where}: {match[0]}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                leaks.append(f"{where}: def {node.name}")
            if isinstance(node, ast.Lambda) and not node.args.args and isinstance(
                    node.body, ast.Constant) and re.fullmatch(r"[a-z]", str(node.body.value)):
                leaks.append(f"{where}:{node.lineno}: lambda: {node.body.value!r}")
    return leaks


def test_no_answer_is_in_the_installed_package() -> None:
    assert answer_leaks(Path(course_lib.__file__).parent) == []


def test_the_scan_finds_an_answer_planted_in_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "course_lib"
    shutil.copytree(Path(course_lib.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    ex = QUESTIONS[0]
    (copy / "exercises" / "planted.py").write_text(
        f'def {ex.name}():\n    return "b"\n\nSLIPS = [lambda: "a"]\n'
        f'# grading.check("{ex.id}", {ex.name}, answer="b")\n', encoding="utf-8")
    assert len(answer_leaks(copy)) == 3


def test_the_sandbox_copy_holds_no_answer(tmp_path: Path) -> None:
    build_sandbox_course_lib(tmp_path, answers_to_strip("seq2seq"))
    assert answer_leaks(tmp_path / "course_lib") == []


# The hardened grader keeps the answer on the trusted side ----------------------------------------


@pytest.mark.parametrize("chapter", sorted({ex.chapter for ex in QUESTIONS}))
def test_the_sandbox_runs_the_hidden_call_without_the_answer(chapter: str) -> None:
    ch = CHAPTERS[chapter]
    spec = load_chapter_spec(ch.slug, ch.exercises, ch.source)
    for ex in spec.exercises:
        assert "answer=" not in ex.hidden_test, ex.exercise_id
        assert ex.hidden_test.strip() == f'grading.check("{ex.exercise_id}", {ex.function})'
    assert spec.answers == {k: v for k, v in notebook_answers().items()
                            if k.startswith(f"{chapter}.")}
    assert without_answer('grading.check("a.b", b, answer="c")') == 'grading.check("a.b", b)'


def test_the_judge_takes_the_answer_from_the_spec_and_the_output_from_the_record() -> None:
    ex = QUESTIONS[0]
    right = answer(ex.id)
    assert right is not None
    wrong = ex.choices.replace(right, "")[0]
    judge = Judge({ex.id: right})
    assert judge.judge_case(ex.id, 0, {"output": right}) is None
    # Whatever else a record carries, only its output counts.
    told = judge.judge_case(ex.id, 0, {"output": wrong, "answer": wrong, "expected": wrong})
    assert told is not None and ex.hint in told
    with pytest.raises(grading.GradingError, match="its hidden test gives the answer"):
        Judge().judge_case(ex.id, 0, {"output": right})


def test_record_mode_records_the_output_and_never_the_answer(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    ex = QUESTIONS[0]
    grading.write_case_inputs(ex, tmp_path / "inputs")
    monkeypatch.setenv(grading.MODE_ENV, "record")
    monkeypatch.setenv(grading.INPUT_DIR_ENV, str(tmp_path / "inputs"))
    monkeypatch.setenv(grading.RECORD_DIR_ENV, str(tmp_path / "records"))
    grading.check(ex.id, lambda: " Q ", answer="z")  # no verdict in the sandbox: none raised
    record = grading.load_record(grading.record_path(tmp_path / "records", ex.id, 0))
    assert record == {"error": None, "reference_called": None, "output": "q"}
