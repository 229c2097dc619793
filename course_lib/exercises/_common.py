"""Helpers shared by every chapter's exercise module: seeded inputs, masks, slips.

Hidden cases are built on the CPU from seeded ``torch.Generator``s. Every seed is mixed with a
secret (:func:`case_secret`): the instructor's grader draws a new one for each grading run and
builds the inputs in its trusted process, which hands them to the sandbox, so nobody can know the
hidden inputs in advance, and a table of course_lib's outputs computed beforehand matches nothing.
Case builders use these helpers for all their randomness (never ``torch.manual_seed``, ``random``
or NumPy's generators), so that the secret reaches every random value.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: The secrets :func:`using_secret` set, innermost last (the trusted grader's, or a test's). The
#: secret is never read from the environment: a notebook can set ``os.environ`` before its hidden
#: tests run, in a kernel that judges it (the stock nbgrader engine), and so preset the secret a
#: table of outputs was built with offline. Where no block is active, each process draws its own
#: (:data:`_PROCESS_SECRET`), so the hidden inputs of a stock-nbgrader kernel are fresh.
_SECRETS: list[str] = []
#: This process's own secret, drawn on first use (the test suite fixes it with
#: :func:`fix_process_secret`, so that a failure can be reproduced).
_PROCESS_SECRET: list[str] = []


def case_secret() -> str:
    """The secret of this process: the innermost :func:`using_secret`'s, else one drawn once per
    process (never from the environment, which the graded notebook can set).

    Example:
        >>> case_secret() == case_secret()
        True
    """
    if _SECRETS:
        return _SECRETS[-1]
    if not _PROCESS_SECRET:
        _PROCESS_SECRET.append(secrets.token_hex(16))
    return _PROCESS_SECRET[0]


def fix_process_secret(value: str) -> None:
    """Make ``value`` this process's own secret (the test suite's, in tests/conftest.py).

    Nothing in a grading run calls it: the hardened grader builds the hidden cases inside
    :func:`using_secret` in its trusted process, and a stock-nbgrader kernel draws its own.
    """
    if not value:
        raise ValueError("the secret must not be empty")
    _PROCESS_SECRET[:] = [value]


@contextmanager
def using_secret(value: str) -> Iterator[None]:
    """Build hidden cases under the secret ``value`` inside the block (the grader's, or a test's).

    Example:
        >>> with using_secret("a"):
        ...     a = mix(1)
        >>> with using_secret("b"):
        ...     b = mix(1)
        >>> a != b
        True
    """
    if not value:
        raise ValueError("the secret must not be empty")
    _SECRETS.append(value)
    try:
        yield
    finally:
        _SECRETS.pop()


def mix(seed: int) -> int:
    """``seed`` mixed with :func:`case_secret`: a 63-bit seed nobody can predict without it.

    Example:
        >>> mix(3) == mix(3), mix(3) == mix(4)
        (True, False)
    """
    digest = hashlib.sha256(f"{case_secret()}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

f32, f64 = torch.float32, torch.float64

#: What a case builder returns: the keyword arguments of the function under test.
Inputs = Callable[[], dict[str, Any]]


def gen(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` mixed with the grading run's secret (:func:`mix`).

    Example:
        >>> torch.randint(10, (3,), generator=gen(0)).tolist() == \\
        ...     torch.randint(10, (3,), generator=gen(0)).tolist()
        True
    """
    return torch.Generator().manual_seed(mix(seed))


def randn(seed: int, *shape: int, dtype: torch.dtype = f32, scale: float = 1.0) -> torch.Tensor:
    """Standard normal values of ``shape`` and ``dtype`` from seed ``seed``, times ``scale``.

    Example:
        >>> randn(0, 2, 3, dtype=f64).dtype
        torch.float64
    """
    return scale * torch.randn(*shape, generator=gen(seed), dtype=dtype)


def pick(seed: int, low: int, high: int) -> int:
    """An integer in ``[low, high]`` drawn from seed ``seed``: a size that varies with the secret.

    Example:
        >>> 3 <= pick(0, 3, 5) <= 5
        True
    """
    if high < low:
        raise ValueError(f"pick: high {high} is below low {low}")
    return low + int(torch.randint(high - low + 1, (1,), generator=gen(seed)).item())


def lengths_mask(lengths: list[int], width: int) -> torch.Tensor:
    """``(B, width)`` bool, True at the first ``lengths[b]`` positions of row ``b`` (the real
    tokens).

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
