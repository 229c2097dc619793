"""The hidden cases' inputs on their way to the sandbox, and the call adapters that may go too.

Under the hardened grader the trusted process builds every hidden case's inputs (with the grading
run's secret mixed into every seed, see :mod:`course_lib.exercises._common`) and writes them with
:func:`write_case_inputs` into a read-only folder of the sandbox; there :func:`read_case_inputs`
reads them back. The bundle names the exercise's call adapter (:func:`call_name`), which must live
in one of :data:`CALL_MODULES`, the only exercise code the sandbox holds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from course_lib.grading.exercise import Exercise, GradingError

#: The modules an ``Exercise.call`` adapter may live in: the only exercise code in the sandbox.
CALL_MODULES = ("course_lib.grading.questions", "course_lib.exercises._calls")


def call_name(ex: Exercise) -> str | None:
    """``"module:qualname"`` of the exercise's call adapter (``None`` without one).

    Raises:
        GradingError: when the adapter lives outside :data:`CALL_MODULES` (the sandbox would
            not have it) or is not a module-level function.

    Example:
        >>> from course_lib.grading.questions import Question
        >>> call_name(Question(id="toy.q", hint="think again"))
        'course_lib.grading.questions:choice'
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
    """The call adapter named by :func:`call_name`, imported from :data:`CALL_MODULES` only.

    Example:
        >>> resolve_call("course_lib.grading.questions:choice").__name__
        'choice'
    """
    if name is None:
        return None
    module, _, qual = str(name).partition(":")
    if module not in CALL_MODULES or not qual.isidentifier():
        raise GradingError(f"unknown call adapter {name!r}")
    adapter: Callable[..., Any] = getattr(importlib.import_module(module), qual)
    return adapter


def case_inputs_path(folder: Path, exercise_id: str) -> Path:
    """The file of an exercise's hidden inputs in ``folder``."""
    return Path(folder) / f"{exercise_id}.pt"


def write_case_inputs(ex: Exercise, folder: Path,
                      inputs: Sequence[dict[str, Any]] | None = None) -> Path:
    """Write an exercise's hidden inputs for the sandbox (trusted side, record mode).

    Args:
        ex: the exercise.
        folder: the folder mounted read-only in the sandbox as ``$COURSE_GRADING_INPUT_DIR``.
        inputs: the cases' inputs when the caller built them already (the judge compares with
            the reference on these very values); built from ``ex.cases()`` otherwise.

    Returns:
        The file written.
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
    return _read_bundle(case_inputs_path(folder, exercise_id), exercise_id, "inputs")


def _read_bundle(path: Path, exercise_id: str, what: str) -> dict[str, Any]:
    """A bundle the trusted grader wrote for ``exercise_id`` (``what`` names it in errors)."""
    if not path.is_file():
        raise GradingError(f"the grader gave no {what} for {exercise_id} ({path} is missing)")
    bundle = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(bundle, dict) or bundle.get("exercise") != exercise_id:
        raise GradingError(f"{path} does not hold the {what} of {exercise_id}")
    return bundle


def probe_inputs_path(folder: Path, exercise_id: str) -> Path:
    """The file of an exercise's memory probe inputs in ``folder``."""
    return Path(folder) / f"{exercise_id}.probe.pt"


def write_probe_inputs(ex: Exercise, folder: Path, inputs: dict[str, Any]) -> Path:
    """Write the inputs of ``ex``'s memory probe for the sandbox (trusted side)."""
    path = probe_inputs_path(folder, ex.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"exercise": ex.id, "call": call_name(ex), "inputs": inputs}, path)
    return path


def read_probe_inputs(folder: Path, exercise_id: str) -> dict[str, Any]:
    """The bundle :func:`write_probe_inputs` wrote (sandbox side)."""
    return _read_bundle(probe_inputs_path(folder, exercise_id), exercise_id, "memory probe")
