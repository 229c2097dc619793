"""The reference guard: a profiler hook that sees a student's function call a graded answer.

While the student's function runs, :func:`run_guarded` watches every Python call. Calling
course_lib's implementation of *any* exercise of *any* chapter, or a course_lib function listed as
computing its answer (``Exercise.forbidden``), directly, through an alias, a
``functools.partial`` or a course_lib class that uses it, fails the case with the message
:data:`REFERENCE_CALL_MESSAGE`, unless the exercise's statement allows it (``Exercise.allowed``).
In the grading sandbox the same objects have no body at all (``autograder/strip.py``, which walks
them with the same :func:`code_objects`).
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: What a student reads when a case called a graded reference (in the kernel's profiler guard, or
#: in the grading sandbox, where the references' bodies are stripped).
REFERENCE_CALL_MESSAGE = ("your solution calls course_lib's implementation of {name}; graded "
                          "exercises must be solved with your own code (torch operations are fine)")
#: The error the sandbox's stripped references raise (autograder/strip.py writes it).
STRIPPED_MARKER = "is not available while grading"


def code_objects(obj: Any) -> Iterable[Any]:
    """The code objects whose execution means ``obj`` was used (functions, methods, classes).

    The one walker of the reference guard and of the grading sandbox's stripping
    (``autograder/strip.py``), so the two can never disagree on what a reference is.

    Example:
        >>> [c.co_name for c in code_objects(is_reference_call)]
        ['is_reference_call']
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


def run_guarded(fn: Callable[[], Any], forbidden: Mapping[Any, str]) -> tuple[Any, str | None]:
    """Run ``fn()`` while watching for calls of forbidden code objects.

    Args:
        fn: the call to watch (the student's function on one case).
        forbidden: code object -> the id of the exercise whose answer it computes.

    Returns:
        ``(result, None)``, or ``(result, exercise_id)`` naming the first exercise whose
        reference implementation was called.

    Example:
        >>> def answer():
        ...     return 42
        >>> run_guarded(lambda: answer() + 1, {answer.__code__: "toy.answer"})
        (43, 'toy.answer')
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
        threading.setprofile(None)
    return result, (hit[0] if hit else None)


def is_reference_call(message: str | None) -> bool:
    """Whether a verdict says the student called a graded reference (it fails the exercise).

    Example:
        >>> is_reference_call(REFERENCE_CALL_MESSAGE.format(name="'toy.f'"))
        True
    """
    return message is not None and message.startswith(REFERENCE_CALL_MESSAGE.split("{", 1)[0])
