"""Every chapter's exercise registry, checked the same way (COURSE_DESIGN.md, grading conventions).

Hidden cases must be deterministic (the trusted grader rebuilds them outside the student's kernel
and must get the very inputs the student's function saw), cover float32 and float64 and a batch of
one where tensors are involved, and the reference must pass its own hidden tests.
"""

from __future__ import annotations

import pkgutil
from typing import Any

import numpy as np
import pytest
import torch

import course_lib.exercises
from course_lib import grading
from course_lib.exercises import _common
from tests.conftest import chapter_slugs, exercise_chapter

CHAPTERS = sorted(m.name for m in pkgutil.iter_modules(course_lib.exercises.__path__)
                  if not m.name.startswith("_"))
EXERCISES = [ex for chapter in CHAPTERS for ex in grading.chapter_exercises(chapter).values()]
#: Exercises with a reference in course_lib (a question's answer is in its notebook only: see
#: tests/test_questions.py).
REFERENCED = [ex for ex in EXERCISES if not isinstance(ex, grading.Question)]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def test_every_chapter_registers_at_least_six_exercises() -> None:
    assert {exercise_chapter(slug) for slug in chapter_slugs()} <= set(CHAPTERS)
    for chapter in CHAPTERS:
        exercises = grading.chapter_exercises(chapter)
        assert len(exercises) >= 6, chapter
        assert all(ex.id.startswith(f"{chapter}.") for ex in exercises.values())


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_cases_are_deterministic_and_named(ex: grading.Exercise) -> None:
    cases = ex.cases()
    # A question (a prediction, a conceptual choice) has one case, the answer; a function several.
    assert len(cases) >= 3 or ex.cases is grading.answer_case, "several hidden cases"
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), f"case names repeat: {names}"
    for case in cases:
        first, second = case.inputs(), case.inputs()
        assert first.keys() == second.keys()
        for key in first:
            ta, tb = _tensors(first[key]), _tensors(second[key])
            assert len(ta) == len(tb) and all(
                a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
                for a, b in zip(ta, tb)), f"{case.name}: input {key!r} differs between two builds"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_cases_cover_both_float_dtypes_and_a_batch_of_one(ex: grading.Exercise) -> None:
    dtypes, leading = set(), set()
    for case in ex.cases():
        for t in (t for v in case.inputs().values() for t in _tensors(v)):
            if t.is_floating_point():
                dtypes.add(t.dtype)
            if t.dim() >= 2:
                leading.add(t.shape[0])
    if dtypes:
        assert {torch.float32, torch.float64} <= dtypes, f"float dtypes covered: {dtypes}"
    if leading:
        assert 1 in leading, "a case with batch size 1"


@pytest.mark.parametrize("ex", REFERENCED, ids=lambda ex: ex.id)
def test_reference_passes_and_is_deterministic(ex: grading.Exercise) -> None:
    assert ex.reference is not None
    results = grading.evaluate(ex.id, ex.reference)
    # The reference itself is in the forbidden set, so calling it directly trips the guard:
    assert all(r.reference_called == ex.id for r in results)
    for case in ex.cases():
        a = grading.to_plain(ex.run(ex.reference, case.inputs()))
        b = grading.to_plain(ex.run(ex.reference, case.inputs()))
        assert grading.compare_plain(a, b, rtol=0.0, atol=0.0) is None
        assert grading.judge(ex, case, a, None, None, largest=0) is None  # bounded: measured 0


def test_comparison_ignores_nothing_the_student_returns() -> None:
    """A sanity check of the tolerance table: float32 noise passes, a 1e-3 error does not."""
    e = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    assert grading.compare_plain(e * (1 + 1e-6), e) is None
    assert grading.compare_plain(e + 1e-3, e) is not None


SLIPS = [(ex, k) for ex in EXERCISES for k in range(len(ex.slips))]


@pytest.mark.parametrize("ex,k", SLIPS, ids=lambda v: getattr(v, "id", str(v)))
def test_every_slip_fails_with_its_own_message(ex: grading.Exercise, k: int) -> None:
    """A common mistake, run through the hidden cases, fails and the student reads its message."""
    slip = ex.slips[k]
    results = grading.evaluate(ex.id, slip.fn)
    failed = [r for r in results if r.message]
    assert failed, f"{ex.id}: the slip {slip.message!r} passes every hidden case"
    assert not any(r.reference_called for r in results), \
        f"{ex.id}: the slip {slip.message!r} calls a graded reference"
    assert any(r.message.startswith(slip.message) for r in failed), (
        f"{ex.id}: the slip {slip.message!r} fails, but a student who makes it reads "
        f"{failed[0].message!r}")


def test_every_exercise_with_tensors_has_slips() -> None:
    """Each exercise over tensors names at least one common mistake and its message."""
    missing = [ex.id for ex in REFERENCED if not ex.slips and ex.diagnose is None]
    assert not missing, f"no slips or diagnosis: {missing}"


# The grading run's secret ----------------------------------------------------------------------

OTHER_SECRETS = ["secret-a", "secret-b"]
RANDOM_EXERCISES = REFERENCED


def _plain_inputs(ex: grading.Exercise) -> list[Any]:
    out = []
    for case in ex.cases():
        values = {}
        for name, value in case.inputs().items():
            try:
                values[name] = grading.to_plain(value)
            except AssertionError:  # a dtype, a step function, a model: compare what it holds
                held = getattr(value, "__dict__", None)
                values[name] = repr(value) if held is None else grading.to_plain(
                    [v for v in held.values() if isinstance(v, torch.Tensor)])
        out.append(values)
    return out


@pytest.mark.parametrize("ex", RANDOM_EXERCISES, ids=lambda ex: ex.id)
def test_hidden_inputs_depend_on_the_secret(ex: grading.Exercise,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Under another grading run's secret some case of every exercise has other inputs, so a
    table of course_lib's outputs computed in advance cannot pass the exercise."""
    seen = []
    for secret in OTHER_SECRETS:
        monkeypatch.setattr(_common, "_SECRETS", [secret])
        seen.append(_plain_inputs(ex))
    assert any(grading.compare_plain(a, b, 0.0, 0.0) for a, b in zip(*seen)), (
        f"{ex.id}: every hidden case has the same inputs whatever the secret")


@pytest.mark.parametrize("secret", OTHER_SECRETS)
@pytest.mark.parametrize("ex", [ex for ex in RANDOM_EXERCISES if ex.slips], ids=lambda ex: ex.id)
def test_every_slip_fails_under_other_secrets(ex: grading.Exercise, secret: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the secret, the reference passes and every slip differs from it on some case."""
    monkeypatch.setattr(_common, "_SECRETS", [secret])
    cases = ex.cases()
    expected = [grading.reference_output(ex, case) for case in cases]
    for slip in ex.slips:
        differs = False
        for case, want in zip(cases, expected):
            inputs = case.inputs()
            try:
                got = grading._post(ex, inputs, grading.to_plain(ex.run(slip.fn, inputs)))
            except Exception:  # noqa: BLE001 - a slip that raises fails that case
                differs = True
                break
            if grading.compare_plain(got, want, case.rtol, case.atol):
                differs = True
                break
        assert differs, f"{ex.id}: under secret {secret!r} the slip {slip.message!r} passes"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_inputs_travel_to_the_sandbox(ex: grading.Exercise, tmp_path) -> None:
    """The trusted grader writes each exercise's inputs for the sandbox (its call adapter lives
    in a module the sandbox has); read back, they give the reference's outputs again."""
    cases = ex.cases()
    grading.write_case_inputs(ex, tmp_path)
    bundle = grading.read_case_inputs(tmp_path, ex.id)
    assert len(bundle["cases"]) == len(cases)
    call = grading.resolve_call(bundle["call"])
    assert call is ex.call
    if ex.reference is None:  # a question: no reference, one case without input
        assert bundle["cases"] == [{}]
        return
    for case, inputs in zip(cases, bundle["cases"]):
        assert grading.compare_plain(grading._post(ex, inputs, grading.to_plain(
            ex.run(ex.reference, inputs))), grading.reference_output(ex, case),
            case.rtol, case.atol) is None
