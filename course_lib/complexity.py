r"""What attention costs, measured: time and peak memory against n, log-log slopes, crossovers.

Taught in chapter 6, section 1. Vaswani et al. (2017), table 1, compare a recurrent layer,
:math:`O(n d^2)` time and :math:`O(n d)` memory, with self-attention, :math:`O(n^2 d)` time and
:math:`O(n^2 + n d)` memory. Counting multiply-adds as 2 FLOPs, for one sequence:

.. math:: \text{GRU: } 12\, n d^2, \qquad \text{LSTM: } 16\, n d^2, \qquad
          \text{attention: } 8\, n d^2 + 4\, n^2 d

(three or four gates of two ``d x d`` matrices; four projections plus :math:`QK^\top` and
:math:`PV`), so attention costs more from :math:`n = d` (GRU) or :math:`n = 2d` (LSTM) on, in
FLOPs. Measured time is another matter: the recurrence runs ``n`` small sequential steps, the
attention a few large parallel products, so the measured crossover lies elsewhere
(:func:`crossover`). A cost growing as :math:`n^p` is a line of slope :math:`p` on log-log axes
(:func:`loglog_slope`).

Peak memory is the largest amount of memory allocated during a call beyond what was allocated
before it: on CUDA from ``torch.cuda.max_memory_allocated``; on the CPU by replaying the
allocation and free events that ``torch.profiler`` records (``profile_memory=True``) and taking
the maximum of their running sum (:func:`peak_memory`). Both count tensors, not the Python heap.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import torch
from torch import nn

from course_lib.attention import scaled_dot_product_attention
from course_lib.checks import check_float_tensor
from course_lib.multihead import merge_heads, split_heads

Kind = Literal["gru", "lstm", "attention"]
KINDS: tuple[str, ...] = ("gru", "lstm", "attention")


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs.

    ``clock`` is wall-clock time by default. On a shared CPU, pass ``time.process_time`` (the
    CPU time of this process, all its threads) with ``torch.set_num_threads(1)``: it counts the
    work done, not the time spent waiting for a core. CUDA work is synchronised before the clock
    stops.

    Example:
        >>> time_call(lambda: sum(range(1000)), repeats=3) > 0
        True
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    sync: Callable[[], None] = (torch.cuda.synchronize if torch.cuda.is_available()
                                else (lambda: None))
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        times.append(clock() - start)
    return statistics.median(times)


def _cpu_peak(fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.name == "[memory]" and str(node.extra_fields.device) == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
    running = peak = 0
    for _, size in sorted(events, key=lambda e: e[0]):
        running += size
        peak = max(peak, running)
    return peak


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated while ``fn()`` runs, beyond what was held before.

    CUDA: ``torch.cuda.max_memory_allocated`` after resetting the peak. CPU: the running sum of
    the profiler's allocation (+) and free (-) events, in time order (see the module docstring).
    What ``fn`` returns is freed only after the call, so it counts.

    Example:
        >>> peak_memory(lambda: torch.zeros(1000, 250))  # 250,000 float32 = 1,000,000 bytes
        1000000
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    if device.type != "cpu":
        raise ValueError(f"peak_memory measures 'cpu' or 'cuda', got {device}")
    return _cpu_peak(fn)


class SelfAttentionLayer(nn.Module):
    """Single-head softmax self-attention with its four ``d x d`` projections, the naive way.

    The scores ``(B, n, n)`` are materialised (course_lib's reference path), the layer the
    complexity table describes; fused kernels that avoid them are the subject of
    :mod:`course_lib.tiled_attention`.
    """

    def __init__(self, d: int, n_heads: int = 1) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float_tensor("x", x, ndim=3, shape=f"(batch, n, d={self.qkv.in_features})")
        if x.shape[-1] != self.qkv.in_features:
            raise ValueError(f"x must have shape (batch, n, d={self.qkv.in_features}), got "
                             f"{tuple(x.shape)}")
        q, k, v = (split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))
        y = scaled_dot_product_attention(q, k, v, impl="reference")  # (B, h, n, d_head)
        out: torch.Tensor = self.out(merge_heads(y))                  # (B, n, d)
        return out


def make_layer(kind: Kind, d: int) -> nn.Module:
    """A GRU layer, an LSTM layer (``nn.GRU``/``nn.LSTM``, width ``d`` in and out) or
    :class:`SelfAttentionLayer`, all mapping ``(B, n, d) -> (B, n, d)``.

    Example:
        >>> make_layer("lstm", 8)(torch.randn(2, 5, 8))[0].shape
        torch.Size([2, 5, 8])
    """
    if kind == "gru":
        return nn.GRU(d, d, batch_first=True)
    if kind == "lstm":
        return nn.LSTM(d, d, batch_first=True)
    if kind == "attention":
        return SelfAttentionLayer(d)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def flops(kind: Kind, n: int, d: int) -> int:
    """Forward FLOPs of one sequence of length ``n`` (the module docstring's formulas).

    Example:
        >>> flops("attention", 64, 64) == flops("gru", 64, 64)  # n = d: the FLOP crossover
        True
    """
    if kind == "gru":
        return 12 * n * d * d
    if kind == "lstm":
        return 16 * n * d * d
    if kind == "attention":
        return 8 * n * d * d + 4 * n * n * d
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


@dataclass
class Measurement:
    """Time (seconds) and peak memory (bytes) of one layer kind at width ``d`` for each ``n``."""

    kind: str
    d: int
    ns: list[int]
    seconds: list[float] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)


@torch.no_grad()
def measure(kind: Kind, ns: Sequence[int], d: int, *, batch: int = 1, repeats: int = 3,
            device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
            seed: int = 0, clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """Time and peak memory of a forward pass (no gradients) of :func:`make_layer` against ``n``.

    ``clock`` as in :func:`time_call`.

    Example:
        >>> m = measure("gru", [8, 16], d=4, repeats=1)
        >>> len(m.seconds), all(b > 0 for b in m.peak_bytes)
        (2, True)
    """
    if not ns or any(n <= 0 for n in ns) or d <= 0:
        raise ValueError(f"need positive lengths and width, got ns={list(ns)}, d={d}")
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # Seeded initialisation on the CPU: the same weights on every device.
        with torch.device("cpu"):
            layer = make_layer(kind, d)
        layer = layer.to(device=device, dtype=dtype)
    result = Measurement(kind, d, list(ns))
    for n in ns:
        x = torch.randn(batch, n, d, generator=g, dtype=dtype, device=g.device).to(device)
        forward = partial(layer, x)
        result.seconds.append(time_call(forward, repeats=repeats, clock=clock))
        result.peak_bytes.append(peak_memory(forward, device))
    return result


def loglog_slope(ns: Sequence[float], ys: Sequence[float]) -> float:
    r"""Least-squares slope :math:`p` of :math:`\log y = p \log n + c`.

    Example:
        >>> round(loglog_slope([10, 100, 1000], [3e2, 3e4, 3e6]), 6)  # y = 3 n^2
        2.0
    """
    if len(ns) != len(ys) or len(ns) < 2:
        raise ValueError(f"need at least two (n, y) pairs of equal length, got {len(ns)} and "
                         f"{len(ys)}")
    if min(ns) <= 0 or min(ys) <= 0:
        raise ValueError("log-log slopes need positive n and y")
    x = [math.log(n) for n in ns]
    y = [math.log(v) for v in ys]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx == 0:
        raise ValueError("all n are equal: no slope")
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx


def crossover(ns: Sequence[float], cost_a: Sequence[float], cost_b: Sequence[float],
              ) -> float | None:
    """The ``n`` from which ``a`` costs more than ``b``, interpolated on log-log axes.

    Takes the last sign change of ``log a - log b`` from negative (or zero) to positive, between
    neighbouring ``n``; returns ``ns[0]`` when ``a`` already costs more at the first ``n`` and
    stays above, and None when ``a`` does not end above ``b``.

    Example:
        >>> round(crossover([1, 10, 100], [1, 100, 10000], [10, 100, 1000]), 6)  # n^2 vs 10 n
        10.0
        >>> round(crossover([10, 100], [10, 1000], [50, 500]), 6)  # gap -log 5 to log 2: n = 50
        50.0
    """
    if not len(ns) == len(cost_a) == len(cost_b) or len(ns) == 0:
        raise ValueError(f"ns, cost_a, cost_b must have one equal, non-zero length; got "
                         f"{len(ns)}, {len(cost_a)}, {len(cost_b)}")
    gap = [math.log(a) - math.log(b) for a, b in zip(cost_a, cost_b)]
    if gap[-1] <= 0:
        return None
    i = len(gap) - 1
    while i > 0 and gap[i - 1] > 0:
        i -= 1
    if i == 0:
        return float(ns[0])
    lo, hi = math.log(ns[i - 1]), math.log(ns[i])
    t = -gap[i - 1] / (gap[i] - gap[i - 1])                          # where the gap is 0
    return math.exp(lo + t * (hi - lo))
