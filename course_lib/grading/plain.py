"""Plain values: what a student's output may be, and how two of them are compared.

A student's output is converted to plain data (NumPy arrays, Python scalars, lists, dicts) by
:func:`to_plain` before anything looks at it, and :func:`compare_plain` says what differs (shape,
dtype, largest error and where, NaN) without printing any input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

#: Default tolerances by dtype: a correct float32 implementation meets them on CPU and GPU
#: (different reduction orders, fused kernels), a wrong one does not.
TOLERANCES: dict[str, tuple[float, float]] = {  # dtype name -> (rtol, atol)
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}

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


def _compare_floats(got: np.ndarray, expected: np.ndarray, rtol: float | None,
                    atol: float | None, path: str) -> str | None:
    """Float arrays of one shape and dtype: close within tolerance, NaN only where expected."""
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


def _compare_arrays(got: Any, expected: np.ndarray, rtol: float | None, atol: float | None,
                    path: str) -> str | None:
    if not isinstance(got, np.ndarray):
        return f"{path}: expected a tensor of shape {tuple(expected.shape)}, got {_describe(got)}"
    if got.shape != expected.shape:
        return f"{path}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    if got.dtype != expected.dtype:
        return f"{path}: expected dtype {expected.dtype}, got {got.dtype}"
    if expected.dtype.kind in "fc":
        return _compare_floats(got, expected, rtol, atol, path)
    if not np.array_equal(got, expected):
        wrong = np.flatnonzero(got.reshape(-1) != expected.reshape(-1))
        i = int(wrong[0])
        return (f"{path}: {wrong.size} of {expected.size} values differ; first at index "
                f"{_index_str(i, got.shape)} (got {got.flat[i]!r}, expected {expected.flat[i]!r})")
    return None


def _compare_containers(got: Any, expected: list[Any] | dict[str, Any], rtol: float | None,
                        atol: float | None, path: str) -> str | None:
    if isinstance(expected, list):
        if not isinstance(got, list):
            return f"{path}: expected a list/tuple of length {len(expected)}, got {_describe(got)}"
        if len(got) != len(expected):
            return f"{path}: expected length {len(expected)}, got {len(got)}"
        pairs = [(g, e, f"{path}[{i}]") for i, (g, e) in enumerate(zip(got, expected))]
    else:
        if not isinstance(got, dict) or sorted(got) != sorted(expected):
            return f"{path}: expected a dict with keys {sorted(expected)}, got {_describe(got)}"
        pairs = [(got[key], expected[key], f"{path}[{key!r}]") for key in expected]
    for g, e, where in pairs:
        msg = compare_plain(g, e, rtol, atol, where)
        if msg:
            return msg
    return None


def compare_plain(
    got: Any, expected: Any, rtol: float | None = None, atol: float | None = None,
    path: str = "output",
) -> str | None:
    """Compare plain values; return ``None`` when they match, else a message saying what differs.

    Float arrays must match in shape and dtype and be close (``|got - expected| <= atol +
    rtol |expected|``, NaN only where expected); integer, boolean and string values must be equal.

    Example:
        >>> print(compare_plain(np.zeros(3), np.ones(3)))
        output: largest error 1 at index (0,) (got 0, expected 1; tolerance atol=1e-09, rtol=1e-07)
    """
    if isinstance(expected, np.ndarray):
        return _compare_arrays(got, expected, rtol, atol, path)
    if isinstance(expected, (list, dict)):
        return _compare_containers(got, expected, rtol, atol, path)
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
