"""Checks of a function's arguments at its entry: an error that names the argument and the problem.

Used by every taught module of course_lib, so that a bad input is answered at the door of the
function the student called ("logits must be a floating-point tensor, got torch.int64"), never by
a traceback from deep inside torch, a silent wrong answer or a silent NaN.
``tests/test_bad_input.py`` feeds every taught function the usual bad inputs and holds each to
that.

Conventions: a wrong type or dtype is a ``TypeError``; a wrong shape, size or value a
``ValueError``; the message starts with the argument's name. The shape and dtype checks read
metadata only; the checks that read values (:func:`check_ids`, :func:`check_finite_tensor`,
:func:`check_positive_tensor`) synchronise with the device, so they guard entry points (a model's
token ids, a loss's targets, a sampler's logits), not inner loops. They skip tensors that hold
no values, on the ``meta`` device (a model built under ``torch.device("meta")`` to count its
FLOPs or parameters without allocating it): those get the metadata checks only. Each check
returns its argument, so that it can be used inline.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch


def _holds_values(x: torch.Tensor) -> bool:
    """False for a tensor on the ``meta`` device: shapes and dtypes only, no values to read."""
    return x.device.type != "meta"


def _layout(shape: str) -> str:
    return f" {shape}" if shape else ""


def check_tensor(name: str, x: object, *, ndim: int | None = None, min_ndim: int = 0,
                 shape: str = "") -> torch.Tensor:
    """``x`` is a tensor with ``ndim`` dimensions (or at least ``min_ndim``).

    Args:
        name: the argument's name, as the caller wrote it.
        x: the argument.
        ndim: the exact number of dimensions, or None.
        min_ndim: the least number of dimensions.
        shape: the expected layout for the message, e.g. ``"(batch, vocab)"``.

    Example:
        >>> check_tensor("lengths", [1, 2])
        Traceback (most recent call last):
        ...
        TypeError: lengths must be a torch.Tensor, got list
        >>> check_tensor("x", torch.zeros(2, 3), ndim=3, shape="(B, T, d)")
        Traceback (most recent call last):
        ...
        ValueError: x must have shape (B, T, d), got shape (2, 3)
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{_layout(shape)}, got {type(x).__name__}")
    if (ndim is not None and x.dim() != ndim) or x.dim() < min_ndim:
        wanted = shape or (f"{ndim} dimensions" if ndim is not None
                           else f"at least {min_ndim} dimension{'s' * (min_ndim != 1)}")
        raise ValueError(f"{name} must have {'shape ' * bool(shape)}{wanted}, got shape "
                         f"{tuple(x.shape)}")
    return x


def check_float_tensor(name: str, x: object, *, ndim: int | None = None, min_ndim: int = 0,
                       shape: str = "") -> torch.Tensor:
    """``x`` is a floating-point tensor (float16, bfloat16, float32, float64) of the given rank.

    Example:
        >>> check_float_tensor("logits", torch.tensor([1, 2]))
        Traceback (most recent call last):
        ...
        TypeError: logits must be a floating-point tensor, got torch.int64
        >>> check_float_tensor("q", torch.tensor(1.0), min_ndim=2, shape="(..., T, d)")
        Traceback (most recent call last):
        ...
        ValueError: q must have shape (..., T, d), got shape ()
    """
    if isinstance(x, torch.Tensor) and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor{_layout(shape)}, got {x.dtype}")
    return check_tensor(name, x, ndim=ndim, min_ndim=min_ndim, shape=shape)


def check_bool_tensor(name: str, x: object, *, ndim: int | None = None, min_ndim: int = 0,
                      shape: str = "") -> torch.Tensor:
    """``x`` is a boolean tensor (a mask: course_lib's ``True`` means "may attend" or "real token").

    Example:
        >>> check_bool_tensor("padding", torch.tensor([[1, 0]]))
        Traceback (most recent call last):
        ...
        TypeError: padding must be a boolean tensor, got torch.int64
    """
    if isinstance(x, torch.Tensor) and x.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor{_layout(shape)}, got {x.dtype}")
    return check_tensor(name, x, ndim=ndim, min_ndim=min_ndim, shape=shape)


def check_int_tensor(name: str, x: object, *, ndim: int | None = None, min_ndim: int = 0,
                     shape: str = "", dtypes: tuple[torch.dtype, ...] | None = None,
                     what: str = "integers") -> torch.Tensor:
    """``x`` is an integer tensor (any integer dtype, or one of ``dtypes``), not bool or float.

    Example:
        >>> check_int_tensor("lengths", torch.tensor([1.0, 3.0]))
        Traceback (most recent call last):
        ...
        TypeError: lengths must hold integers, got torch.float32
        >>> check_int_tensor("targets", torch.tensor([1], dtype=torch.int32), dtypes=(torch.long,))
        Traceback (most recent call last):
        ...
        TypeError: targets must hold integers of dtype torch.int64, got torch.int32
    """
    if isinstance(x, torch.Tensor):
        integer = not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)
        if not integer or (dtypes is not None and x.dtype not in dtypes):
            of = f" of dtype {' or '.join(str(d) for d in dtypes)}" if dtypes else ""
            raise TypeError(f"{name} must hold {what}{of}{_layout(shape)}, got {x.dtype}")
    return check_tensor(name, x, ndim=ndim, min_ndim=min_ndim, shape=shape)


def check_ids(name: str, ids: object, vocab_size: int | None = None, *, ndim: int | None = None,
              min_ndim: int = 0, shape: str = "", ignore_index: int | None = None,
              dtypes: tuple[torch.dtype, ...] | None = None) -> torch.Tensor:
    """``ids`` is an integer tensor whose values lie in ``[0, vocab_size)``.

    Args:
        name, ndim, min_ndim, shape: as in :func:`check_tensor`.
        ids: the argument.
        vocab_size: ids must be below it (None: any non-negative id).
        ignore_index: a value allowed besides (a loss's ``-100``: not predicted).
        dtypes: the integer dtypes allowed (None: any), e.g. the targets ``F.cross_entropy``
            takes, ``(torch.long, torch.uint8)``.

    Example:
        >>> check_ids("idx", torch.tensor([[1, 11]]), 11)
        Traceback (most recent call last):
        ...
        ValueError: idx holds ids outside [0, 11): min 1, max 11
        >>> check_ids("targets", torch.tensor([2, -100]), 5, ignore_index=-100).tolist()
        [2, -100]
    """
    ids = check_int_tensor(name, ids, ndim=ndim, min_ndim=min_ndim, shape=shape, dtypes=dtypes,
                           what="token ids")
    if not _holds_values(ids):
        return ids
    values = ids if ignore_index is None else ids[ids != ignore_index]
    if values.numel():
        low, high = (int(v) for v in torch.aminmax(values))
        if low < 0 or (vocab_size is not None and high >= vocab_size):
            span = f"[0, {vocab_size})" if vocab_size is not None else "[0, ...)"
            allowed = f" (or {ignore_index}, ignored)" if ignore_index is not None else ""
            raise ValueError(f"{name} holds ids outside {span}{allowed}: min {low}, max {high}")
    return ids


def check_finite_tensor(name: str, x: torch.Tensor) -> torch.Tensor:
    """No NaN and no infinity in ``x``.

    Example:
        >>> check_finite_tensor("x", torch.tensor([1.0, float("nan")]))
        Traceback (most recent call last):
        ...
        ValueError: x holds NaN or infinite values (1 of 2)
    """
    if not _holds_values(x):
        return x
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(f"{name} holds NaN or infinite values ({int(bad.sum())} of {x.numel()})")
    return x


def check_positive_tensor(name: str, x: torch.Tensor) -> torch.Tensor:
    """Every value of ``x`` finite and positive (a count, a size, a budget).

    Example:
        >>> check_positive_tensor("n_params", torch.tensor([1e9, 0.0]))
        Traceback (most recent call last):
        ...
        ValueError: n_params must be positive and finite everywhere, got 0.0 at index 1
    """
    if not _holds_values(x):
        return x
    bad = ~(torch.isfinite(x) & (x > 0))
    if bool(bad.any()):
        where = int(bad.reshape(-1).nonzero()[0])
        raise ValueError(f"{name} must be positive and finite everywhere, got "
                         f"{x.reshape(-1)[where].item()} at index {where}")
    return x


def check_same_dtype(**tensors: torch.Tensor) -> torch.dtype:
    """All the tensors have one dtype (torch does not mix float32 and float64 in a product).

    Example:
        >>> check_same_dtype(x=torch.zeros(1), weight=torch.zeros(1, dtype=torch.float64))
        Traceback (most recent call last):
        ...
        TypeError: x and weight must have one dtype, got x torch.float32, weight torch.float64
    """
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        names = list(dtypes)
        joined = ", ".join(names[:-1]) + " and " + names[-1]
        got = ", ".join(f"{n} {d}" for n, d in dtypes.items())
        raise TypeError(f"{joined} must have one dtype, got {got}")
    return next(iter(dtypes.values()))


def _real(name: str, value: object) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def check_finite(name: str, value: object) -> float:
    """``value`` is a finite real number (not NaN, not infinite); returned as a float.

    Example:
        >>> check_finite("alpha", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: alpha must be finite, got nan
    """
    v = _real(name, value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value}")
    return v


def check_positive(name: str, value: object) -> float:
    """``value`` is a finite real number ``> 0``; returned as a float.

    Example:
        >>> check_positive("flops", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: flops must be finite and positive, got nan
    """
    v = _real(name, value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and positive, got {value}")
    return v


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` is an integer (not a bool, not a float such as 2.5), at least ``minimum``.

    Example:
        >>> check_int("r", 2.5, minimum=1)
        Traceback (most recent call last):
        ...
        TypeError: r must be an int, got float 2.5
        >>> check_int("d", 0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: d must be a positive integer, got 0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        named = {0: "a non-negative integer", 1: "a positive integer"}
        wanted = named.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {wanted}, got {value}")
    return int(value)


def check_token_id(name: str, value: object, vocab_size: int, *,
                   vocabulary: str = "the vocabulary") -> int:
    """``value`` is one token id, an int in ``[0, vocab_size)`` (an end-of-sequence id, a mask id).

    Example:
        >>> check_token_id("eos_id", 4, 4, vocabulary="the step's vocabulary")
        Traceback (most recent call last):
        ...
        ValueError: eos_id=4 is not a token id of the step's vocabulary of 4 tokens
    """
    v = check_int(name, value, minimum=0)
    if v >= vocab_size:
        raise ValueError(f"{name}={v} is not a token id of {vocabulary} of {vocab_size} tokens")
    return v


def check_sequence(name: str, value: object) -> Sequence[Any]:
    """``value`` is a sequence (a list or a tuple, not a string: a string's letters are no list).

    Example:
        >>> check_sequence("correct", 3)
        Traceback (most recent call last):
        ...
        TypeError: correct must be a sequence (a list or a tuple), got int 3
    """
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence (a list or a tuple), got "
                        f"{type(value).__name__} {value!r}")
    return value
