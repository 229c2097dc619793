"""The exercise model: a graded exercise, its hidden cases, its common mistakes, and the errors.

An :class:`Exercise` is data that ``course_lib/exercises/<chapter>.py`` registers: the reference
a student's function must match, the hidden :class:`Case` objects it runs on, and the
:class:`Slip` objects that name a common mistake. A question (a letter to choose) is the
subclass :class:`course_lib.grading.questions.Question`, whose answer is not in course_lib.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


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
        rtol, atol: tolerances overriding the dtype defaults of
            :data:`course_lib.grading.plain.TOLERANCES`.
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
class MemoryProbe:
    """A memory rule graded from outside the student's process: one large case, run alone.

    The trusted grader runs the student's function on ``inputs()`` in a fresh sandbox whose
    memory it limits itself (the sandbox's cgroup and every sandbox process's address space):
    the memory held after the setup cell, plus the inputs, plus ``budget_bytes``. The size is
    chosen so that the algorithm the statement asks for needs a small part of the budget and
    the tensor the rule forbids (``forbidden_bytes``, e.g. the ``T x T`` scores) does not fit in
    it. Nothing the student's process measures or writes decides this verdict: a function that
    runs out of memory fails, one that finishes is compared with the reference as any case.

    Attributes:
        name: what the case covers, shown in messages (never its values).
        inputs: zero-argument callable returning the keyword arguments (seeded, like a case).
        budget_bytes: what the function may allocate beyond its inputs.
        forbidden_bytes: the size of the tensor the rule forbids (at least twice the budget).
        rtol, atol: tolerances, as a case's.
    """

    name: str
    inputs: Callable[[], dict[str, Any]]
    budget_bytes: int
    forbidden_bytes: int
    rtol: float | None = None
    atol: float | None = None

    def __post_init__(self) -> None:
        if not 0 < 2 * self.budget_bytes <= self.forbidden_bytes:
            raise ValueError(f"memory probe {self.name!r}: the budget ({self.budget_bytes:,} "
                             f"bytes) must be positive and at most half of the forbidden "
                             f"allocation ({self.forbidden_bytes:,} bytes)")

    def case(self) -> Case:
        """The probe as a :class:`Case` (the judge compares its output like any case's)."""
        return Case(self.name, self.inputs, self.rtol, self.atol)


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
            ``None`` only for a question, whose answer is not in course_lib.
        cases: zero-argument callable returning the hidden cases.
        slips: the common mistakes (:class:`Slip`), tried in order on a mismatch.
        forbidden: more callables (functions, classes) whose use counts as calling the reference.
        diagnose: optional ``(inputs, got, expected) -> str | None`` for mistakes that are not one
            wrong implementation ("row 2 does not sum to one", "masked key 4 got weight 0.3").
            It receives plain values (see :func:`course_lib.grading.plain.to_plain`) and must not
            reveal the inputs.
        call: optional ``(fn, inputs) -> output`` to call the function some other way than
            ``fn(**inputs)`` (e.g. a step function wrapped around a small model). It runs in the
            grading sandbox, so it lives in one of
            :data:`course_lib.grading.inputs.CALL_MODULES`, only calls the function and converts
            its output, and never computes a verdict.
        postprocess: optional ``(inputs, plain output) -> plain value`` applied, on the trusted
            side, to the student's output and to the reference's before they are compared (e.g.
            a random function's draws turned into verdicts on their statistics).
        largest_tensor: optional ``inputs -> n``: the most elements any tensor newly allocated
            by a torch operation may have while the student's function runs (views and
            in-place results do not count). It grades an algorithm's memory ("without building
            the T x T matrix"); :class:`course_lib.grading.meter.AllocationMeter` measures it.
        allowed: course_lib callables the statement allows, although another exercise (of any
            chapter) forbids them.
        too_large: what the memory message says the function must not build.
        memory_probe: the memory rule as the hardened grader enforces it, from outside the
            student's process (:class:`MemoryProbe`); ``largest_tensor`` is then only the
            student's own check in the notebook (compare mode), which the grader never trusts.
    """

    id: str
    reference: Callable[..., Any] | None
    cases: Callable[[], Sequence[Case]]
    slips: tuple[Slip, ...] = ()
    forbidden: tuple[Callable[..., Any], ...] = ()
    diagnose: Callable[[Mapping[str, Any], Any, Any], str | None] | None = None
    call: Callable[[Callable[..., Any], dict[str, Any]], Any] | None = None
    postprocess: Callable[[Mapping[str, Any], Any], Any] | None = None
    largest_tensor: Callable[[Mapping[str, Any]], int] | None = None
    allowed: tuple[Callable[..., Any], ...] = ()
    too_large: str = "anything as large as the full score matrix"
    memory_probe: MemoryProbe | None = None

    @property
    def name(self) -> str:
        """The function the student writes: ``"additive_score"`` of ``"seq2seq.additive_score"``."""
        return self.id.split(".", 1)[1]

    @property
    def chapter(self) -> str:
        """The exercise module's name: ``"seq2seq"`` of ``"seq2seq.additive_score"``."""
        return self.id.split(".", 1)[0]

    def run(self, fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        """``fn`` on one case's inputs, through the exercise's ``call`` adapter when it has one.

        Example:
            >>> Exercise("toy.add", reference=None, cases=list).run(lambda x, y: x + y,
            ...                                                     {"x": 1, "y": 2})
            3
        """
        return self.call(fn, inputs) if self.call is not None else fn(**inputs)
