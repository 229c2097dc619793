"""Helpers shared by every chapter's exercise module: seeded inputs, masks, slips.

Hidden cases are built on the CPU from seeded ``torch.Generator``s, so the trusted judge rebuilds
exactly the inputs the student's function saw. Case builders use these helpers and torch alone,
never an exercise's reference (the grading sandbox strips the references' bodies).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

f32, f64 = torch.float32, torch.float64

#: What a case builder returns: the keyword arguments of the function under test.
Inputs = Callable[[], dict[str, Any]]


def gen(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``.

    Example:
        >>> torch.randint(10, (3,), generator=gen(0)).tolist() == \\
        ...     torch.randint(10, (3,), generator=gen(0)).tolist()
        True
    """
    return torch.Generator().manual_seed(seed)


def randn(seed: int, *shape: int, dtype: torch.dtype = f32, scale: float = 1.0) -> torch.Tensor:
    """Standard normal values of ``shape`` and ``dtype`` from seed ``seed``, times ``scale``.

    Example:
        >>> randn(0, 2, 3, dtype=f64).dtype
        torch.float64
    """
    return scale * torch.randn(*shape, generator=gen(seed), dtype=dtype)


def lengths_mask(lengths: list[int], width: int) -> torch.Tensor:
    """``(B, width)`` bool, True at the first ``lengths[b]`` positions of row ``b`` (the real tokens).

    Example:
        >>> lengths_mask([3, 1], 4).int().tolist()
        [[1, 1, 1, 0], [1, 0, 0, 0]]
    """
    if any(n < 0 or n > width for n in lengths):
        raise ValueError(f"lengths {lengths} must lie between 0 and width {width}")
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def lower_triangle(n_queries: int, n_keys: int | None = None) -> torch.Tensor:
    """``(n_queries, n_keys)`` bool, True where key ``j <= i`` (causal: attend to the past).

    Example:
        >>> lower_triangle(3).int().tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    n_keys = n_queries if n_keys is None else n_keys
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril()
