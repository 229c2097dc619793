"""Grading helpers: the one entry point every hidden test goes through.

A hidden test cell in a solution notebook is a single call::

    from course_lib import grading
    grading.check("seq2seq.additive_score", additive_score)

``check`` looks the exercise up in the registry (``course_lib/exercises/<chapter>.py``), builds
each hidden case's inputs from a fixed seed, runs the student's function on them and then, by
mode (environment variable ``COURSE_GRADING_MODE``):

* ``compare`` (default; plain nbgrader, nbval, a student's own kernel): computes course_lib's
  reference output in the same kernel and raises ``AssertionError`` with a message that says what
  is wrong (shape, dtype, largest error and where, NaN, a non-tensor result) without printing the
  hidden inputs.
* ``record`` (the instructor's hardened ``python -m autograder grade``): the trusted process builds
  every hidden case's inputs (with the grading run's secret mixed into every seed, see
  :mod:`course_lib.exercises._common`) and writes them with :func:`write_case_inputs` into a
  read-only folder of the sandbox (``COURSE_GRADING_INPUT_DIR``); ``check`` runs the student's
  function on them and only records its outputs as plain arrays (``.npz`` files, never pickles)
  under ``COURSE_GRADING_RECORD_DIR``. The trusted process, which runs no student code, computes
  the reference on the same inputs and compares with :func:`compare_plain`, so patching
  assertions inside the student's kernel changes nothing. The sandbox holds no exercise module:
  no reference, slip, diagnosis or case builder is there to call.

The reference guard: while the student's function runs, a profiler hook watches every Python call.
Calling course_lib's implementation of *any* exercise of *any* chapter, or a course_lib function
listed as computing its answer (``Exercise.forbidden``), directly, through an alias, a
``functools.partial`` or a course_lib class that uses it, fails the case with
:class:`ReferenceCallError`, unless the exercise's statement allows it (``Exercise.allowed``).
Exercises say so in their statement. In the grading sandbox the same objects have no body at all
(``autograder/strip.py``).

Visible tests run inside :func:`visible_tests`, so that "Run All" on a blank release runs the whole
chapter: an exercise whose solution cell still holds nbgrader's stub is reported as not attempted
(and the cell does not fail), except under a grader, where it fails as before and earns 0.

One verdict path: :func:`judge` alone turns a case's outcome (output, error, reference call) into
the message a student reads, in the kernel (compare mode) and in the trusted judge alike. The
common mistakes of an exercise are data (:class:`Slip`): a wrong implementation and the message a
student gets when their output equals its output.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import math
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MODE_ENV = "COURSE_GRADING_MODE"
RECORD_DIR_ENV = "COURSE_GRADING_RECORD_DIR"
#: Record mode: the folder of the hidden cases' inputs, written by the trusted process.
INPUT_DIR_ENV = "COURSE_GRADING_INPUT_DIR"
#: The modules an ``Exercise.call`` adapter may live in: the only exercise code in the sandbox.
CALL_MODULES = ("course_lib.grading", "course_lib.exercises._calls")
#: Set by stock nbgrader while it autogrades (``nbgrader autograde``): visible tests then fail on a
#: blank exercise instead of reporting it as not attempted.
NBGRADER_ENV = "NBGRADER_EXECUTION"

#: What a student reads when a case called a graded reference (in the kernel's profiler guard, or
#: in the grading sandbox, where the references' bodies are stripped).
REFERENCE_CALL_MESSAGE = ("your solution calls course_lib's implementation of {name}; graded "
                          "exercises must be solved with your own code (torch operations are fine)")
#: The error the sandbox's stripped references raise (autograder/strip.py writes it).
STRIPPED_MARKER = "is not available while grading"

#: Default tolerances by dtype: a correct float32 implementation meets them on CPU and GPU
#: (different reduction orders, fused kernels), a wrong one does not.
TOLERANCES: dict[str, tuple[float, float]] = {  # dtype name -> (rtol, atol)
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}


class GradingError(Exception):
    """A problem in the grading set-up itself (unknown exercise, bad registry entry)."""


class ReferenceCallError(AssertionError):
    """The student's function called course_lib's implementation of a graded exercise."""


@dataclass(frozen=True)
class Case:
    """One hidden test case: a name a student may see and a deterministic input builder.

    Attributes:
        name: what the case covers, shown in messages ("float64, batch size 1, padded keys").
            Never the inputs themselves.
        inputs: zero-argument callable returning the keyword arguments of the function under
            test. It must build the same values every time (seeded ``torch.Generator``).
        rtol, atol: tolerances overriding the dtype defaults of :data:`TOLERANCES`.
    """

    name: str
    inputs: Callable[[], dict[str, Any]]
    rtol: float | None = None
    atol: float | None = None


@dataclass(frozen=True)
class Slip:
    """A common mistake, as data: a wrong implementation and what a student who made it reads.

    When a student's output differs from the reference but equals ``fn``'s output on the same
    case (within the case's tolerance), the student reads ``message``. ``fn`` takes the same
    arguments as the exercise; it is trusted code and must not call any exercise's reference.

    Example:
        >>> slip = Slip("sums instead of averaging", lambda x: x.sum())
        >>> slip.message
        'sums instead of averaging'
    """

    message: str
    fn: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: its reference, its hidden cases and how to explain a mismatch.

    Points are not here: they live in the notebook's nbgrader metadata only (the test cell's
    ``points``), which the graders and the title's total read.

    Attributes:
        id: ``"<chapter>.<name>"``, e.g. ``"seq2seq.additive_score"``; ``<chapter>`` names the
            module ``course_lib.exercises.<chapter>`` that registers it, ``<name>`` the function
            the student writes (and the solution cell's ``grade_id``).
        reference: course_lib's implementation; the student's function must match its outputs.
        cases: zero-argument callable returning the hidden cases.
        slips: the common mistakes (:class:`Slip`), tried in order on a mismatch.
        forbidden: more callables (functions, classes) whose use counts as calling the reference.
        diagnose: optional ``(inputs, got, expected) -> str | None`` for mistakes that are not one
            wrong implementation ("row 2 does not sum to one", "masked key 4 got weight 0.3").
            It receives plain values (see :func:`to_plain`) and must not reveal the inputs.
        call: optional ``(fn, inputs) -> output`` to call the function some other way than
            ``fn(**inputs)`` (e.g. a step function wrapped around a small model). It runs in the
            grading sandbox, so it lives in one of :data:`CALL_MODULES`, only calls the
            function and converts its output, and never computes a verdict.
        postprocess: optional ``(inputs, plain output) -> plain value`` applied, on the trusted
            side, to the student's output and to the reference's before they are compared (e.g.
            a random function's draws turned into verdicts on their statistics).
        largest_tensor: optional ``inputs -> n``: the most elements any tensor newly allocated
            by a torch operation may have while the student's function runs (views and
            in-place results do not count). It grades an algorithm's memory ("without building
            the T x T matrix"); :class:`AllocationMeter` measures it.
        allowed: course_lib callables the statement allows, although another exercise (of any
            chapter) forbids them.
        too_large: what the memory message says the function must not build.
    """

    id: str
    reference: Callable[..., Any]
    cases: Callable[[], Sequence[Case]]
    slips: tuple[Slip, ...] = ()
    forbidden: tuple[Callable[..., Any], ...] = ()
    diagnose: Callable[[Mapping[str, Any], Any, Any], str | None] | None = None
    call: Callable[[Callable[..., Any], dict[str, Any]], Any] | None = None
    postprocess: Callable[[Mapping[str, Any], Any], Any] | None = None
    largest_tensor: Callable[[Mapping[str, Any]], int] | None = None
    allowed: tuple[Callable[..., Any], ...] = ()
    too_large: str = "anything as large as the full score matrix"

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    def run(self, fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        return self.call(fn, inputs) if self.call is not None else fn(**inputs)


def answer_case() -> list[Case]:
    """The one case of a question exercise: the student's function takes no input.

    A question (a prediction, a conceptual choice) is written as a function with no argument that
    returns the answer: a letter for a multiple choice (see :func:`choice`), or a number.
    """
    return [Case("your answer", dict)]


def choice(fn: Callable[[], Any], inputs: dict[str, Any]) -> Any:
    """``Exercise.call`` of a multiple-choice question: the answer as one lower-case letter.

    Example:
        >>> choice(lambda: " B ", {})
        'b'
    """
    answer = fn(**inputs)
    if type(answer) is not str or len(answer.strip()) != 1:
        raise AssertionError(f"return one letter as a string, e.g. 'a'; got {answer!r}")
    return answer.strip().lower()


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def chapter_exercises(chapter: str) -> dict[str, Exercise]:
    """All exercises of a chapter, by id, from ``course_lib.exercises.<chapter>.EXERCISES``."""
    try:
        module = importlib.import_module(f"course_lib.exercises.{chapter}")
    except ModuleNotFoundError as err:
        if os.environ.get(MODE_ENV) == "record":  # the grading sandbox holds no exercise module
            raise GradingError(f"the exercises of chapter {chapter!r} {STRIPPED_MARKER}: solve "
                               "the exercise with your own code") from err
        raise GradingError(f"no exercises registered for chapter {chapter!r}") from err
    exercises = getattr(module, "EXERCISES", None)
    if not isinstance(exercises, dict):
        raise GradingError(f"course_lib.exercises.{chapter} has no EXERCISES dict")
    return exercises


def get_exercise(exercise_id: str) -> Exercise:
    """Look up an exercise by id, e.g. ``get_exercise("seq2seq.additive_score")``."""
    if "." not in exercise_id:
        raise GradingError(f"exercise id {exercise_id!r} is not of the form '<chapter>.<name>'")
    exercises = chapter_exercises(exercise_id.split(".", 1)[0])
    if exercise_id not in exercises:
        known = ", ".join(sorted(exercises))
        raise GradingError(f"unknown exercise {exercise_id!r}; this chapter has: {known}")
    return exercises[exercise_id]


# --------------------------------------------------------------------------------------------
# The reference guard
# --------------------------------------------------------------------------------------------


def code_objects(obj: Any) -> Iterable[Any]:
    """The code objects whose execution means ``obj`` was used (functions, methods, classes).

    The one walker of the reference guard and of the grading sandbox's stripping
    (``autograder/strip.py``), so the two can never disagree on what a reference is.

    Example:
        >>> [c.co_name for c in code_objects(to_plain)]
        ['to_plain']
    """
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if inspect.isclass(obj):
        for value in vars(obj).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value):
                # A decorated method (@torch.no_grad()) is a wrapper whose code object every
                # function with that decorator shares: watch the function it wraps instead.
                yield inspect.unwrap(value).__code__
    elif inspect.isfunction(obj) or inspect.ismethod(obj):
        yield obj.__code__
    elif hasattr(obj, "forward"):  # an nn.Module instance
        yield from code_objects(type(obj))


def exercise_chapters() -> list[str]:
    """Every chapter with an exercise module (``course_lib/exercises/<chapter>.py``), sorted.

    Example:
        >>> "seq2seq" in exercise_chapters()
        True
    """
    folder = Path(__file__).with_name("exercises")
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def answer_objects(chapters: Iterable[str] | None = None) -> list[tuple[Any, str]]:
    """``(object, exercise id)`` for every reference and forbidden object of ``chapters``.

    These are the course_lib objects that compute an exercise's answer: the guard fails a case
    that calls one, and the grading sandbox holds none of their bodies. ``chapters`` defaults to
    every chapter (:func:`exercise_chapters`).
    """
    out: list[tuple[Any, str]] = []
    for chapter in exercise_chapters() if chapters is None else chapters:
        for ex in chapter_exercises(chapter).values():
            out += [(obj, ex.id) for obj in (ex.reference, *ex.forbidden)]
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


def run_guarded(fn: Callable[[], Any], forbidden: Mapping[Any, str]) -> tuple[Any, str | None]:
    """Run ``fn()`` while watching for calls of forbidden code objects.

    Returns:
        ``(result, None)``, or ``(result, exercise_id)`` naming the first exercise whose
        reference implementation was called.
    """
    hit: list[str] = []

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and not hit:
            name = forbidden.get(frame.f_code)
            if name is not None:
                hit.append(name)

    previous = sys.getprofile()
    sys.setprofile(profiler)
    threading.setprofile(profiler)
    try:
        result = fn()
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)  # type: ignore[arg-type]
    return result, (hit[0] if hit else None)


# --------------------------------------------------------------------------------------------
# Plain values: what a student's output is allowed to be
# --------------------------------------------------------------------------------------------

_PLAIN_SCALARS = (bool, int, float, str, type(None))


def to_plain(value: Any, path: str = "output") -> Any:
    """Convert a student's output to plain data: numpy arrays, Python scalars, lists, dicts.

    Only exact types are accepted (``type(x) is torch.Tensor``, not a subclass), so an object that
    overrides ``__eq__``, ``__torch_function__`` or ``__array__`` cannot pass itself off as a
    correct answer. Tensors keep their dtype; their device is dropped.

    Raises:
        AssertionError: naming the offending part (``output[1]``) and its type.

    Example:
        >>> to_plain((torch.tensor([1.0]), 3))
        [array([1.], dtype=float32), 3]
    """
    kind = type(value)
    if kind is torch.Tensor:
        if value.is_complex() or value.dtype in (torch.bfloat16,):
            value = value.to(torch.float32)
        return value.detach().to("cpu").numpy().copy()
    if kind is np.ndarray:
        if value.dtype == object:
            raise AssertionError(f"{path} is a NumPy array of Python objects; expected numbers")
        return value.copy()
    if kind in _PLAIN_SCALARS:
        return value
    if kind in (np.float32, np.float64, np.int32, np.int64, np.bool_):
        return value.item()
    if kind in (list, tuple):
        return [to_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is dict:
        out = {}
        for key, v in value.items():
            if type(key) is not str:
                raise AssertionError(f"{path} has a key of type {type(key).__name__}; expected str")
            out[key] = to_plain(v, f"{path}[{key!r}]")
        return out
    raise AssertionError(
        f"{path} is a {kind.__module__}.{kind.__qualname__}; expected a torch.Tensor, a number, "
        "a string, or a list/tuple/dict of those"
    )


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, list):
        return f"list of length {len(value)}"
    if isinstance(value, dict):
        return f"dict with keys {sorted(value)}"
    return type(value).__name__


def _index_str(flat_index: int, shape: tuple[int, ...]) -> str:
    if not shape:
        return "()"
    return str(tuple(int(i) for i in np.unravel_index(flat_index, shape)))


def compare_plain(
    got: Any, expected: Any, rtol: float | None = None, atol: float | None = None,
    path: str = "output",
) -> str | None:
    """Compare plain values; return ``None`` when they match, else a message saying what differs.

    Float arrays must match in shape and dtype and be close (``|got - expected| <= atol +
    rtol |expected|``, NaN only where expected); integer, boolean and string values must be equal.

    Example:
        >>> compare_plain(np.zeros(3), np.ones(3))
        'output: largest error 1 at index (0,) (got 0, expected 1; tolerance atol=1e-09, rtol=1e-07)'
    """
    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"{path}: expected a tensor of shape {tuple(expected.shape)}, got {_describe(got)}"
        if got.shape != expected.shape:
            return f"{path}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.dtype != expected.dtype:
            return f"{path}: expected dtype {expected.dtype}, got {got.dtype}"
        if expected.dtype.kind in "fc":
            default_rtol, default_atol = TOLERANCES.get(str(expected.dtype), (1e-4, 1e-5))
            rtol = default_rtol if rtol is None else rtol
            atol = default_atol if atol is None else atol
            g = got.astype(np.float64)
            e = expected.astype(np.float64)
            bad_nan = np.isnan(g) & ~np.isnan(e)
            if bad_nan.any():
                i = int(np.flatnonzero(bad_nan)[0])
                return (f"{path}: NaN at index {_index_str(i, got.shape)} where a number was "
                        f"expected ({int(bad_nan.sum())} NaN values in all)")
            with np.errstate(invalid="ignore"):
                err = np.abs(g - e)
                err = np.where(np.isnan(e) & np.isnan(g), 0.0, err)
                err = np.where(np.isinf(e) & (g == e), 0.0, err)
                err = np.where(np.isnan(err), np.inf, err)
                excess = err - (atol + rtol * np.abs(np.nan_to_num(e)))
            if (excess > 0).any():
                i = int(np.argmax(err))
                return (f"{path}: largest error {err.flat[i]:.3g} at index "
                        f"{_index_str(i, got.shape)} (got {g.flat[i]:.6g}, expected "
                        f"{e.flat[i]:.6g}; tolerance atol={atol:g}, rtol={rtol:g})")
            return None
        if not np.array_equal(got, expected):
            wrong = np.flatnonzero(got.reshape(-1) != expected.reshape(-1))
            i = int(wrong[0])
            return (f"{path}: {wrong.size} of {expected.size} values differ; first at index "
                    f"{_index_str(i, got.shape)} (got {got.flat[i]!r}, expected {expected.flat[i]!r})")
        return None
    if isinstance(expected, list):
        if not isinstance(got, list):
            return f"{path}: expected a list/tuple of length {len(expected)}, got {_describe(got)}"
        if len(got) != len(expected):
            return f"{path}: expected length {len(expected)}, got {len(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            msg = compare_plain(g, e, rtol, atol, f"{path}[{i}]")
            if msg:
                return msg
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(expected):
            return f"{path}: expected a dict with keys {sorted(expected)}, got {_describe(got)}"
        for key in expected:
            msg = compare_plain(got[key], expected[key], rtol, atol, f"{path}[{key!r}]")
            if msg:
                return msg
        return None
    if isinstance(expected, float) and not isinstance(expected, bool):
        if type(got) not in (int, float) or isinstance(got, bool):
            return f"{path}: expected a number, got {_describe(got)}"
        rtol = 1e-6 if rtol is None else rtol
        atol = 1e-8 if atol is None else atol
        if not (math.isclose(got, expected, rel_tol=rtol, abs_tol=atol)
                or (math.isnan(got) and math.isnan(expected))):
            return f"{path}: got {got:.6g}, expected {expected:.6g}"
        return None
    if type(got) is not type(expected) or got != expected:
        return f"{path}: got {got!r}, expected {expected!r}"
    return None


# --------------------------------------------------------------------------------------------
# Records (hardened mode): plain arrays in .npz files, never pickles
# --------------------------------------------------------------------------------------------


def _flatten(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Describe ``value`` as JSON, moving arrays into ``arrays`` (keys ``a0``, ``a1``...)."""
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"__array__": key}
    if isinstance(value, list):
        return [_flatten(v, arrays) for v in value]
    if isinstance(value, dict):
        return {"__dict__": {k: _flatten(v, arrays) for k, v in value.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _unflatten(spec: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(spec, dict) and "__array__" in spec:
        return np.asarray(arrays[spec["__array__"]])
    if isinstance(spec, dict) and "__dict__" in spec:
        return {k: _unflatten(v, arrays) for k, v in spec["__dict__"].items()}
    if isinstance(spec, dict) and "__float__" in spec:
        return float(spec["__float__"])
    if isinstance(spec, list):
        return [_unflatten(v, arrays) for v in spec]
    return spec


def record_path(root: Path, exercise_id: str, case_index: int) -> Path:
    return Path(root) / exercise_id / f"case{case_index:02d}.npz"


def save_record(path: Path, *, output: Any = None, error: str | None = None,
                reference_called: str | None = None, largest: int | None = None) -> None:
    """Write one case's outcome: the plain output, or the error a student's code raised.

    ``largest`` is the measured largest allocation (:class:`AllocationMeter`), when measured.
    """
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {
        "error": error,
        "reference_called": reference_called,
        "output": None if error else _flatten(output, arrays),
    }
    if largest is not None:
        meta["largest"] = int(largest)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, __meta__=np.array(json.dumps(meta)), **arrays)


def load_record(path: Path) -> dict[str, Any]:
    """Read a record written by :func:`save_record` (``allow_pickle=False``: data only)."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["__meta__"]))
        arrays = {k: data[k] for k in data.files if k != "__meta__"}
    if meta.get("output") is not None:
        meta["output"] = _unflatten(meta["output"], arrays)
    return meta


# --------------------------------------------------------------------------------------------
# Visible tests: a blank exercise does not stop "Run All"
# --------------------------------------------------------------------------------------------


def under_grader() -> bool:
    """Whether a grader runs this kernel (stock nbgrader's autograde, or the hardened record mode)."""
    return bool(os.environ.get(NBGRADER_ENV)) or os.environ.get(MODE_ENV) == "record"


def _is_blank_stub(err: BaseException, name: str) -> bool:
    """Whether ``err`` is nbgrader's stub (``raise NotImplementedError()``) in function ``name``."""
    if type(err) is not NotImplementedError or err.args:
        return False
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == name


@contextmanager
def visible_tests(exercise_id: str) -> Iterator[None]:
    """Run an exercise's visible tests; a blank exercise is reported, not raised.

    Wrap the visible part of a test cell::

        with grading.visible_tests("seq2seq.sequence_loss"):
            assert sequence_loss(...).shape == ()

    * all assertions pass: prints ``visible tests passed``;
    * a wrong attempt: the assertion (or the student's error) propagates, loudly, as always;
    * the solution cell still holds nbgrader's stub (``raise NotImplementedError()`` in the
      exercise's own function): prints that the exercise is not attempted yet and lets "Run All"
      go on; under a grader (:func:`under_grader`) the error propagates, so the exercise gets 0.

    Example:
        >>> def f():
        ...     raise NotImplementedError()
        >>> with visible_tests("toy.f"):
        ...     f()
        toy.f: not attempted yet (this exercise scores 0 until you write it in the cell above)
    """
    name = exercise_id.split(".", 1)[-1]
    try:
        yield
    except NotImplementedError as err:
        if under_grader() or not _is_blank_stub(err, name):
            raise
        print(f"{exercise_id}: not attempted yet (this exercise scores 0 until you write it in "
              "the cell above)")
        return
    print("visible tests passed")


# --------------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    """Outcome of one case: ``message`` is ``None`` when it passed."""

    index: int
    name: str
    message: str | None = None
    reference_called: str | None = None


class AllocationMeter(TorchDispatchMode):
    """The largest tensor (in elements) that any torch operation allocates while it is active.

    Views (``k.T``, ``expand``) and in-place results share an input's storage and do not count;
    a new tensor does, whatever made it (``q @ k.T``, ``torch.zeros(T, T)``, ``softmax``).

    Example:
        >>> q = torch.ones(6, 2)
        >>> with AllocationMeter() as meter:
        ...     _ = (q @ q.T).sum()
        >>> meter.largest
        36
        >>> with AllocationMeter() as meter:
        ...     _ = q.T.expand(3, 2, 6)
        >>> meter.largest
        0
    """

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        given = {_storage_ptr(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and _storage_ptr(t) not in given:
                self.largest = max(self.largest, t.numel())
        return out


def _storage_ptr(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less layouts
        return None


def _invoke(call: Callable[..., Any] | None, fn: Callable[..., Any],
            inputs: dict[str, Any]) -> Any:
    return call(fn, inputs) if call is not None else fn(**inputs)


def run_student(ex: Exercise | None, fn: Callable[..., Any], case: Case | None,
                forbidden: Mapping[Any, str], *, inputs: dict[str, Any] | None = None,
                call: Callable[..., Any] | None = None,
                measure: bool | None = None) -> tuple[Any, str | None, str | None, int | None]:
    """Run the student's function on one case.

    Returns ``(plain output, error message, reference hit, largest allocation)``; the last is
    ``None`` unless measured (``measure``, by default when the exercise bounds it).
    """
    if inputs is None:
        assert case is not None
        inputs = case.inputs()
    if ex is not None:
        call = ex.call
        measure = ex.largest_tensor is not None if measure is None else measure
    meter = AllocationMeter() if measure else None

    def go() -> Any:
        if meter is None:
            return _invoke(call, fn, inputs)
        with meter:
            return _invoke(call, fn, inputs)

    largest = None
    try:
        raw, hit = run_guarded(go, forbidden)
    except Exception as err:  # the student's code raised: that is this case's verdict
        return None, f"your function raised {type(err).__name__}: {err}", None, None
    finally:
        largest = None if meter is None else meter.largest
    if hit is not None:
        return None, None, hit, largest
    try:
        return to_plain(raw), None, None, largest
    except AssertionError as err:
        return None, str(err), None, largest


def _post(ex: Exercise, inputs: Mapping[str, Any], plain: Any) -> Any:
    return plain if ex.postprocess is None else to_plain(ex.postprocess(inputs, plain))


def reference_output(ex: Exercise, case: Case, inputs: dict[str, Any] | None = None) -> Any:
    """course_lib's answer to one case, as plain values (the trusted judge caches it)."""
    inputs = case.inputs() if inputs is None else inputs
    return _post(ex, inputs, to_plain(ex.run(ex.reference, copy.deepcopy(inputs))))


def explain(ex: Exercise, case: Case, got: Any, expected: Any,
            inputs: dict[str, Any] | None = None) -> str | None:
    """The exercise's own words for a mismatch: the first slip the output equals, or diagnose."""
    inputs = case.inputs() if inputs is None else inputs
    for slip in ex.slips:
        try:
            slipped = _post(ex, inputs, to_plain(ex.run(slip.fn, copy.deepcopy(inputs))))
        except Exception:  # noqa: BLE001 - a slip that does not apply to this case says nothing
            continue
        if compare_plain(got, slipped, case.rtol, case.atol) is None:
            return slip.message
    if ex.diagnose is not None:
        try:
            return ex.diagnose(inputs, got, expected)
        except Exception:  # noqa: BLE001 - a diagnosis must never break grading
            return None
    return None


def judge(ex: Exercise, case: Case, got: Any, error: str | None, hit: str | None,
          expected: Any = None, *, largest: int | None = None,
          inputs: dict[str, Any] | None = None) -> str | None:
    """The verdict on one case: ``None`` when it passes, else the message a student reads.

    The one place that turns an outcome into words, in the kernel and in the trusted judge.

    Args:
        got: the student's plain output (see :func:`to_plain`), or ``None`` after an error.
        error: what the student's code raised, if it raised.
        hit: the exercise whose reference the student's code called, if it did.
        expected: the reference's plain output when the caller has it cached; computed otherwise.
        largest: the largest allocation measured while the student's function ran (exercises
            with ``largest_tensor``).
        inputs: the case's inputs when the caller has them (built from ``case`` otherwise).
    """
    if hit is not None:
        return REFERENCE_CALL_MESSAGE.format(name=repr(hit))
    if error is not None:
        if STRIPPED_MARKER in error:  # the grading sandbox's copy of course_lib
            return REFERENCE_CALL_MESSAGE.format(name="a graded exercise")
        return error[:2000]
    inputs = case.inputs() if inputs is None else inputs
    if expected is None:
        expected = reference_output(ex, case, inputs)
    try:
        got = _post(ex, inputs, got)
    except Exception as err:  # noqa: BLE001 - an output the check cannot read fails the case
        return f"your output could not be checked ({type(err).__name__}: {err})"[:2000]
    msg = compare_plain(got, expected, case.rtol, case.atol)
    if msg and ex.cases is answer_case:
        # A question's comparison would print the right answer: say only why this one is wrong.
        return explain(ex, case, got, expected, inputs) or "that is not the right answer"
    if msg:
        extra = explain(ex, case, got, expected, inputs)
        return f"{extra}\n    ({msg})" if extra else msg
    if ex.largest_tensor is not None:
        bound = int(ex.largest_tensor(inputs))
        if largest is None:
            return "the grader could not measure the memory your function used"
        if largest > bound:
            return (f"the output is right, but your function built a tensor of {largest:,} "
                    f"elements where the statement allows at most {bound:,} at this size: "
                    f"it must not build {ex.too_large}")
    return None


def is_reference_call(message: str | None) -> bool:
    """Whether a verdict says the student called a graded reference (it fails the exercise)."""
    return bool(message) and message.startswith(REFERENCE_CALL_MESSAGE.split("{", 1)[0])


def evaluate(exercise_id: str, fn: Callable[..., Any]) -> list[CaseResult]:
    """Run and judge every hidden case in this process (compare mode)."""
    ex = get_exercise(exercise_id)
    forbidden = forbidden_code_objects(ex.chapter, ex)
    results = []
    for k, case in enumerate(ex.cases()):
        inputs = case.inputs()
        got, error, hit, largest = run_student(ex, fn, case, forbidden,
                                               inputs=copy.deepcopy(inputs))
        results.append(CaseResult(k, case.name, judge(ex, case, got, error, hit, largest=largest,
                                                      inputs=inputs), hit))
    return results


# --------------------------------------------------------------------------------------------
# Record mode: inputs from the trusted side, outputs back to it
# --------------------------------------------------------------------------------------------


def call_name(ex: Exercise) -> str | None:
    """``"module:qualname"`` of the exercise's call adapter (``None`` without one).

    Raises:
        GradingError: when the adapter lives outside :data:`CALL_MODULES` (the sandbox would
            not have it) or is not a module-level function.

    Example:
        >>> call_name(Exercise("toy.q", reference=lambda: "a", cases=answer_case, call=choice))
        'course_lib.grading:choice'
    """
    if ex.call is None:
        return None
    module, qual = getattr(ex.call, "__module__", ""), getattr(ex.call, "__qualname__", "")
    if module not in CALL_MODULES or not qual.isidentifier():
        raise GradingError(f"{ex.id}: its call adapter {module}.{qual} must be a module-level "
                           f"function of {' or '.join(CALL_MODULES)} (the grading sandbox holds "
                           "no other exercise code)")
    return f"{module}:{qual}"


def resolve_call(name: str | None) -> Callable[..., Any] | None:
    """The call adapter named by :func:`call_name`, imported from :data:`CALL_MODULES` only."""
    if name is None:
        return None
    module, _, qual = str(name).partition(":")
    if module not in CALL_MODULES or not qual.isidentifier():
        raise GradingError(f"unknown call adapter {name!r}")
    return getattr(importlib.import_module(module), qual)


def case_inputs_path(folder: Path, exercise_id: str) -> Path:
    return Path(folder) / f"{exercise_id}.pt"


def write_case_inputs(ex: Exercise, folder: Path,
                      inputs: Sequence[dict[str, Any]] | None = None) -> Path:
    """Write an exercise's hidden inputs for the sandbox (trusted side, record mode).

    Args:
        ex: the exercise.
        folder: the folder mounted read-only in the sandbox as ``$COURSE_GRADING_INPUT_DIR``.
        inputs: the cases' inputs when the caller built them already (the judge compares with
            the reference on these very values); built from ``ex.cases()`` otherwise.
    """
    values = [case.inputs() for case in ex.cases()] if inputs is None else list(inputs)
    bundle = {"exercise": ex.id, "call": call_name(ex),
              "measure": ex.largest_tensor is not None, "cases": values}
    path = case_inputs_path(folder, ex.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(bundle, path)
    return path


def read_case_inputs(folder: Path, exercise_id: str) -> dict[str, Any]:
    """The bundle :func:`write_case_inputs` wrote (sandbox side: the file comes from the grader)."""
    path = case_inputs_path(folder, exercise_id)
    if not path.is_file():
        raise GradingError(f"the grader gave no inputs for {exercise_id} ({path} is missing)")
    bundle = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(bundle, dict) or bundle.get("exercise") != exercise_id:
        raise GradingError(f"{path} does not hold the inputs of {exercise_id}")
    return bundle


def record(exercise_id: str, fn: Callable[..., Any], root: Path) -> None:
    """Run every hidden case on the grader's inputs and write the outcomes under ``root``."""
    folder = os.environ.get(INPUT_DIR_ENV)
    if not folder:
        raise GradingError(f"{MODE_ENV}=record needs {INPUT_DIR_ENV} (the grader's inputs)")
    bundle = read_case_inputs(Path(folder), exercise_id)
    call = resolve_call(bundle["call"])
    try:  # the guard where the exercise modules exist; the sandbox has none (bodies stripped)
        forbidden = forbidden_code_objects(exercise_id.split(".", 1)[0],
                                           get_exercise(exercise_id))
    except GradingError:
        forbidden = {}
    for k, inputs in enumerate(bundle["cases"]):
        got, error, hit, largest = run_student(None, fn, None, forbidden,
                                               inputs=copy.deepcopy(inputs), call=call,
                                               measure=bool(bundle["measure"]))
        save_record(record_path(root, exercise_id, k), output=got, error=error,
                    reference_called=hit, largest=largest)


def format_failures(exercise_id: str, results: Sequence[CaseResult]) -> str | None:
    """One message for all failed cases, or ``None`` when every case passed."""
    failed = [r for r in results if r.message]
    if not failed:
        return None
    if any(r.reference_called for r in failed):
        return next(r.message for r in failed if r.reference_called)
    lines = [f"{exercise_id}: {len(failed)} of {len(results)} hidden test cases failed."]
    for r in failed:
        lines.append(f"  case {r.index + 1} ({r.name}): {r.message}")
    return "\n".join(lines)


def check(exercise_id: str, fn: Callable[..., Any]) -> None:
    """Run the hidden tests of one exercise on the student's function ``fn``.

    In compare mode raises ``AssertionError`` listing the failed cases (what is wrong, never the
    hidden inputs); in record mode writes the outputs for the trusted grader and returns.

    A hidden test cell is one call::

        grading.check("seq2seq.additive_score", additive_score)
    """
    if not callable(fn):
        raise AssertionError(f"{exercise_id}: expected a function, got {type(fn).__name__}")
    mode = os.environ.get(MODE_ENV, "compare")
    if mode == "record":
        root = os.environ.get(RECORD_DIR_ENV)
        if not root:
            raise GradingError(f"{MODE_ENV}=record needs {RECORD_DIR_ENV}")
        record(exercise_id, fn, Path(root))
        return
    results = evaluate(exercise_id, fn)
    message = format_failures(exercise_id, results)
    if message:
        if any(r.reference_called for r in results):
            raise ReferenceCallError(message)
        raise AssertionError(message)
    print(f"{exercise_id}: all hidden test cases passed.")
