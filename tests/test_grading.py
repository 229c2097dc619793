"""Tests of course_lib.grading: plain values, comparison messages, records, the reference guard."""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from course_lib import grading
from course_lib.grading import Case, Exercise, ReferenceCallError


# A tiny chapter registered for these tests only: module course_lib.exercises.toychapter.
def _ref_double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def _ref_rowsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


class _RefModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @torch.no_grad()
    def frozen(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _cases() -> list[Case]:
    def make(seed: int, shape: tuple[int, ...], dtype: torch.dtype):
        def inputs():
            g = torch.Generator().manual_seed(seed)
            return {"x": torch.randn(shape, generator=g, dtype=dtype)}
        return inputs
    return [Case("float32, 2x3", make(0, (2, 3), torch.float32)),
            Case("float64, batch size 1", make(1, (1, 4), torch.float64))]


@pytest.fixture()
def toy_chapter(monkeypatch: pytest.MonkeyPatch):
    module = types.ModuleType("course_lib.exercises.toychapter")
    exercises = [
        Exercise(id="toychapter.double", reference=_ref_double, cases=_cases),
        Exercise(id="toychapter.rowsum", reference=_ref_rowsum, cases=_cases,
                 forbidden=(_RefModule,),
                 diagnose=lambda inputs, got, expected: "the sum runs over the wrong axis"),
    ]
    module.EXERCISES = {ex.id: ex for ex in exercises}
    monkeypatch.setitem(sys.modules, "course_lib.exercises.toychapter", module)
    return module


# ---- to_plain ---------------------------------------------------------------------------------

def test_to_plain_converts_nested_tensors_and_keeps_dtype() -> None:
    plain = grading.to_plain((torch.ones(2, dtype=torch.float64), [3, "a"], {"k": torch.tensor(1)}))
    assert plain[0].dtype == np.float64 and plain[0].tolist() == [1.0, 1.0]
    assert plain[1] == [3, "a"]
    assert plain[2]["k"].tolist() == 1


class _AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True


class _SneakyTensor(torch.Tensor):
    pass


@pytest.mark.parametrize("value, fragment", [
    (_AlwaysEqual(), "_AlwaysEqual"),
    (torch.zeros(2).as_subclass(_SneakyTensor), "_SneakyTensor"),
    (np.array([object()]), "Python objects"),
    ([torch.zeros(1), _AlwaysEqual()], "output[1]"),
])
def test_to_plain_rejects_objects_that_could_fake_equality(value: object, fragment: str) -> None:
    with pytest.raises(AssertionError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        grading.to_plain(value)


# ---- compare_plain ----------------------------------------------------------------------------

def test_compare_accepts_values_within_tolerance() -> None:
    e = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    assert grading.compare_plain(e + 1e-7, e) is None


@pytest.mark.parametrize("got, expected, fragment", [
    (np.zeros((3, 2)), np.zeros((2, 3)), "expected shape (2, 3), got (3, 2)"),
    (np.zeros(3, np.float32), np.zeros(3), "expected dtype float64, got float32"),
    (np.array([0.0, 0.5, 0.0]), np.zeros(3), "largest error 0.5 at index (1,)"),
    (np.array([0.0, np.nan]), np.zeros(2), "NaN at index (1,)"),
    (np.array([1, 2, 4]), np.array([1, 2, 3]), "first at index (2,)"),
    ([np.zeros(1)], [np.zeros(1), np.zeros(1)], "expected length 2, got 1"),
    (3, [np.zeros(1)], "expected a list/tuple"),
    (0.5, 0.25, "got 0.5, expected 0.25"),
])
def test_compare_explains_the_mismatch(got: object, expected: object, fragment: str) -> None:
    message = grading.compare_plain(got, expected)
    assert message is not None and fragment in message


def test_compare_treats_matching_infinities_and_nans_as_equal() -> None:
    e = np.array([np.inf, -np.inf, np.nan, 1.0])
    assert grading.compare_plain(e.copy(), e) is None


# ---- records ----------------------------------------------------------------------------------

def test_record_round_trip_without_pickle(tmp_path) -> None:
    out = grading.to_plain((torch.arange(3), {"w": torch.ones(2, 2)}, 1.5, float("inf"), "x"))
    path = grading.record_path(tmp_path, "toychapter.double", 3)
    grading.save_record(path, output=out)
    back = grading.load_record(path)
    assert back["error"] is None and back["reference_called"] is None
    assert grading.compare_plain(back["output"], out) is None
    assert path.name == "case03.npz"


def test_record_keeps_errors_and_reference_hits(tmp_path) -> None:
    path = tmp_path / "r.npz"
    grading.save_record(path, error="boom", reference_called="toychapter.double")
    assert grading.load_record(path) == {"error": "boom", "output": None,
                                         "reference_called": "toychapter.double"}


# ---- the reference guard ----------------------------------------------------------------------

@pytest.mark.parametrize("student", [
    lambda x: _ref_double(x),
    functools.partial(_ref_double),
    lambda x: 2 * x + 0 * _ref_rowsum(x).sum(),  # another exercise of the same chapter
    lambda x: _RefModule()(x) - 1 + x,            # a forbidden class
])
def test_guard_detects_every_route_to_a_reference(toy_chapter, student) -> None:
    with pytest.raises(ReferenceCallError, match="calls course_lib's implementation"):
        grading.check("toychapter.double", student)


def test_guard_ignores_other_functions_sharing_a_decorator(toy_chapter) -> None:
    """_RefModule.frozen is @torch.no_grad(): other no-grad functions must not count as it."""

    @torch.no_grad()
    def student(x):
        return 2 * x

    grading.check("toychapter.double", student)
    with pytest.raises(ReferenceCallError):
        grading.check("toychapter.double", lambda x: _RefModule().frozen(x) - 1 + x)


def test_guard_sees_calls_made_in_threads(toy_chapter) -> None:
    import concurrent.futures

    def student(x):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(_ref_double, x).result()

    with pytest.raises(ReferenceCallError):
        grading.check("toychapter.double", student)


def test_guard_restores_an_existing_profiler(toy_chapter) -> None:
    def keep(frame, event, arg):
        return None
    sys.setprofile(keep)
    try:
        grading.check("toychapter.double", lambda x: x * 2)
        assert sys.getprofile() is keep
    finally:
        sys.setprofile(None)


# ---- check / evaluate -------------------------------------------------------------------------

def test_correct_solution_passes(toy_chapter, capsys) -> None:
    grading.check("toychapter.double", lambda x: x + x)
    assert "all hidden test cases passed" in capsys.readouterr().out


def test_wrong_solution_fails_with_case_names_but_no_inputs(toy_chapter) -> None:
    with pytest.raises(AssertionError) as info:
        grading.check("toychapter.double", lambda x: 3 * x)
    text = str(info.value)
    assert "2 of 2 hidden test cases failed" in text
    assert "float64, batch size 1" in text and "largest error" in text
    assert "tensor(" not in text  # no hidden input is printed


def test_diagnose_adds_the_exercise_specific_explanation(toy_chapter) -> None:
    with pytest.raises(AssertionError, match="the sum runs over the wrong axis"):
        grading.check("toychapter.rowsum", lambda x: x.sum(0))


def test_crash_wrong_type_and_not_callable_are_reported(toy_chapter) -> None:
    def crash(x):
        raise NotImplementedError()
    with pytest.raises(AssertionError, match="your function raised NotImplementedError"):
        grading.check("toychapter.double", crash)
    with pytest.raises(AssertionError, match="_AlwaysEqual"):
        grading.check("toychapter.double", lambda x: _AlwaysEqual())
    with pytest.raises(AssertionError, match="expected a function"):
        grading.check("toychapter.double", None)  # type: ignore[arg-type]


def test_float32_dtype_must_be_kept(toy_chapter) -> None:
    with pytest.raises(AssertionError, match="expected dtype float64, got float32"):
        grading.check("toychapter.double", lambda x: (2 * x).float())


def test_record_mode_writes_outputs_and_never_raises(toy_chapter, tmp_path, monkeypatch) -> None:
    inputs = tmp_path / "inputs"
    for exercise_id in ("toychapter.double", "toychapter.rowsum"):
        grading.write_case_inputs(grading.get_exercise(exercise_id), inputs)
    monkeypatch.setenv(grading.MODE_ENV, "record")
    monkeypatch.setenv(grading.RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(grading.INPUT_DIR_ENV, str(inputs))
    grading.check("toychapter.double", lambda x: 3 * x)  # wrong, but recording does not judge
    grading.check("toychapter.rowsum", lambda x: _ref_rowsum(x))
    ex = grading.get_exercise("toychapter.double")
    for k, case in enumerate(ex.cases()):
        rec = grading.load_record(grading.record_path(tmp_path, ex.id, k))
        assert grading.judge(ex, case, rec["output"], rec["error"], rec["reference_called"])
    rec = grading.load_record(grading.record_path(tmp_path, "toychapter.rowsum", 0))
    assert rec["reference_called"] == "toychapter.rowsum"


def test_record_mode_needs_the_graders_inputs(toy_chapter, tmp_path, monkeypatch) -> None:
    """In the sandbox the inputs come from the trusted grader: no folder, or no file, is an error
    of the grading set-up, never a silent pass."""
    monkeypatch.setenv(grading.MODE_ENV, "record")
    monkeypatch.setenv(grading.RECORD_DIR_ENV, str(tmp_path))
    with pytest.raises(grading.GradingError, match="COURSE_GRADING_INPUT_DIR"):
        grading.check("toychapter.double", _ref_double)
    monkeypatch.setenv(grading.INPUT_DIR_ENV, str(tmp_path / "none"))
    with pytest.raises(grading.GradingError, match="gave no inputs for toychapter.double"):
        grading.check("toychapter.double", _ref_double)


def test_allocation_meter_grades_the_memory_of_an_algorithm(toy_chapter) -> None:
    """``largest_tensor`` fails a right answer that builds a tensor above the bound."""
    ex = Exercise(id="toychapter.double", reference=_ref_double, cases=_cases,
                  largest_tensor=lambda inputs: inputs["x"].numel())
    case = ex.cases()[0]
    x = case.inputs()["x"]
    big = lambda x: (x.reshape(-1, 1) * torch.ones(1, x.numel(), dtype=x.dtype)).diagonal()\
        .reshape(x.shape) * 2  # noqa: E731 - right output through an n x n tensor
    got, error, hit, largest = grading.run_student(ex, big, case, {})
    assert error is None and largest == x.numel() ** 2
    message = grading.judge(ex, case, got, error, hit, largest=largest)
    assert message and f"at most {x.numel():,}" in message
    got, error, hit, largest = grading.run_student(ex, lambda x: 2 * x, case, {})
    assert largest == x.numel()
    assert grading.judge(ex, case, got, error, hit, largest=largest) is None


def test_unknown_exercises_are_named(toy_chapter) -> None:
    with pytest.raises(grading.GradingError, match="this chapter has: toychapter.double"):
        grading.get_exercise("toychapter.nope")
    with pytest.raises(grading.GradingError, match="no exercises registered"):
        grading.get_exercise("nochapter.x")
    with pytest.raises(grading.GradingError, match="not of the form"):
        grading.get_exercise("double")


# ---- slips: common mistakes as data -----------------------------------------------------------


def test_a_slip_gives_its_message_and_other_mistakes_the_plain_comparison(monkeypatch) -> None:
    module = types.ModuleType("course_lib.exercises.slipchapter")
    ex = Exercise(id="slipchapter.double", reference=_ref_double, cases=_cases,
                  slips=(grading.Slip("you tripled instead of doubling", lambda x: 3 * x),
                         grading.Slip("a slip that raises says nothing", lambda x: x.nope)))
    module.EXERCISES = {ex.id: ex}
    monkeypatch.setitem(sys.modules, "course_lib.exercises.slipchapter", module)
    tripled = grading.evaluate(ex.id, lambda x: 3 * x)
    assert all(r.message.startswith("you tripled instead of doubling") for r in tripled)
    assert all("largest error" in r.message for r in tripled), "the comparison is kept below"
    other = grading.evaluate(ex.id, lambda x: 5 * x)
    assert all(r.message.startswith("output: largest error") for r in other)


def test_judge_is_the_one_verdict_path_for_kernel_and_trusted_judge(toy_chapter) -> None:
    ex = toy_chapter.EXERCISES["toychapter.double"]
    case = ex.cases()[0]
    expected = grading.reference_output(ex, case)
    assert grading.judge(ex, case, expected, None, None) is None
    assert grading.judge(ex, case, expected, None, None, expected=expected) is None
    called = grading.judge(ex, case, None, None, "toychapter.rowsum")
    stripped = grading.judge(ex, case, None, "RuntimeError: course_lib's implementation of f "
                             + grading.STRIPPED_MARKER + ": solve it", None)
    assert grading.is_reference_call(called) and grading.is_reference_call(stripped)
    assert "'toychapter.rowsum'" in called
    assert not grading.is_reference_call(grading.judge(ex, case, None, "ValueError: x", None))


def test_one_code_object_walker_for_the_guard_and_the_sandbox_stripping() -> None:
    """A forbidden class's decorated method counts as a use of it, for the guard and the strip."""
    from autograder import strip

    codes = set(grading.code_objects(_RefModule))
    assert _RefModule.frozen.__wrapped__.__code__ in codes  # unwrapped: not torch's shared wrapper
    assert strip._codes(_RefModule) == codes
    stripped, names = strip.strip_source(
        "class _RefModule:\n    def frozen(self, x):\n        return x\n", {"_RefModule"})
    assert names == ["_RefModule.frozen"] and "return x" not in stripped


# ---- visible tests: a blank exercise does not stop Run All -------------------------------------


def _blank() -> None:
    raise NotImplementedError()


def test_visible_tests_report_a_blank_exercise_and_go_on(monkeypatch, capsys) -> None:
    monkeypatch.delenv(grading.NBGRADER_ENV, raising=False)
    monkeypatch.delenv(grading.MODE_ENV, raising=False)
    with grading.visible_tests("toy._blank"):
        _blank()
    assert "toy._blank: not attempted yet" in capsys.readouterr().out


def test_visible_tests_print_success_and_let_a_wrong_attempt_fail(capsys) -> None:
    with grading.visible_tests("toy.f"):
        pass
    assert capsys.readouterr().out == "visible tests passed\n"
    with pytest.raises(AssertionError, match="expected 2"):
        with grading.visible_tests("toy.f"):
            assert 1 == 2, "expected 2"


@pytest.mark.parametrize("env,value", [(grading.NBGRADER_ENV, "autograde"),
                                       (grading.NBGRADER_ENV, "validate"),
                                       (grading.MODE_ENV, "record")])
def test_under_a_grader_a_blank_exercise_still_fails(monkeypatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(NotImplementedError):
        with grading.visible_tests("toy._blank"):
            _blank()


def test_a_not_implemented_error_of_the_students_own_making_is_not_blank(monkeypatch) -> None:
    """Only nbgrader's stub in the exercise's own function counts as 'not attempted'."""
    monkeypatch.delenv(grading.NBGRADER_ENV, raising=False)

    def helper() -> None:
        raise NotImplementedError()

    def f() -> None:
        helper()

    with pytest.raises(NotImplementedError):
        with grading.visible_tests("toy.f"):
            f()
    with pytest.raises(NotImplementedError):
        with grading.visible_tests("toy._blank"):
            raise NotImplementedError("with a message: the student's own")


# ---- questions --------------------------------------------------------------------------------


@pytest.fixture()
def quiz(monkeypatch: pytest.MonkeyPatch) -> grading.Question:
    module = types.ModuleType("course_lib.exercises.quiz")
    question = grading.Question(id="quiz.q", choices="abc", hint="weigh cause against effect")
    module.EXERCISES = {question.id: question}
    monkeypatch.setitem(sys.modules, "course_lib.exercises.quiz", module)
    return question


def test_a_multiple_choice_question_is_graded_by_its_letter(quiz: grading.Question) -> None:
    def failures(fn: Callable[[], Any], answer: str = "b") -> str:
        return grading.format_failures(quiz.id, grading.evaluate(quiz.id, fn, answer)) or ""

    assert failures(lambda: " B ") == ""
    for letter in "ac":
        wrong = failures(lambda letter=letter: letter)
        assert "that is not the right answer; weigh cause against effect" in wrong
        assert "'b'" not in wrong and "(b)" not in wrong, "feedback never gives it away"
    assert "answer with one of the letters a, b, c; got 'd'" in failures(lambda: "d")
    assert "one letter" in failures(lambda: None)
    assert failures(lambda: "c", answer="c") == ""  # the answer is the caller's, not the package's


def test_check_passes_a_questions_answer_and_requires_it(quiz: grading.Question, capsys) -> None:
    grading.check(quiz.id, lambda: "a", answer="a")
    assert "all hidden test cases passed" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not the right answer"):
        grading.check(quiz.id, lambda: "a", answer="b")
    with pytest.raises(grading.GradingError, match="its hidden test gives the answer"):
        grading.check(quiz.id, lambda: "a")


def test_a_question_declaration_is_checked() -> None:
    with pytest.raises(grading.GradingError, match="distinct lower-case letters"):
        grading.Question(id="quiz.q", choices="aab", hint="think")
    with pytest.raises(grading.GradingError, match="needs a hint"):
        grading.Question(id="quiz.q", choices="abc")
    with pytest.raises(grading.GradingError, match="no reference or slips"):
        grading.Question(id="quiz.q", hint="think", reference=lambda: "a")
    with pytest.raises(grading.GradingError, match="no reference or slips"):
        grading.Question(id="quiz.q", hint="think", slips=(grading.Slip("no", lambda: "a"),))
