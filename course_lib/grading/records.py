"""Records (hardened mode): one case's outcome as plain arrays in an ``.npz`` file, never a pickle.

The sandbox writes a record per hidden case (:func:`save_record`); the trusted judge reads it
with ``allow_pickle=False`` (:func:`load_record`), so a record can carry data and nothing else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


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
    """Where case ``case_index`` of an exercise is recorded under ``root``.

    Example:
        >>> record_path(Path("out"), "seq2seq.masked_softmax", 3).as_posix()
        'out/seq2seq.masked_softmax/case03.npz'
    """
    return Path(root) / exercise_id / f"case{case_index:02d}.npz"


def save_record(path: Path, *, output: Any = None, error: str | None = None,
                reference_called: str | None = None, largest: int | None = None) -> None:
    """Write one case's outcome: the plain output, or the error a student's code raised.

    ``largest`` is the measured largest allocation
    (:class:`course_lib.grading.meter.AllocationMeter`), when measured.
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
    payload: dict[str, Any] = {"__meta__": np.array(json.dumps(meta)), **arrays}
    np.savez(path, **payload)


def load_record(path: Path) -> dict[str, Any]:
    """Read a record written by :func:`save_record` (``allow_pickle=False``: data only)."""
    with np.load(path, allow_pickle=False) as data:
        meta: dict[str, Any] = json.loads(str(data["__meta__"]))
        arrays = {k: data[k] for k in data.files if k != "__meta__"}
    if meta.get("output") is not None:
        meta["output"] = _unflatten(meta["output"], arrays)
    return meta
