"""Graded exercises of chapter 6, "Efficient attention": references, hidden cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the patterns of
:mod:`course_lib.sparse_attention`, the linear attention forms of
:mod:`course_lib.linear_attention`, the online softmax and tiled attention of
:mod:`course_lib.tiled_attention`, and sparsemax and entmax of :mod:`course_lib.entmax`.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import entmax, linear_attention, sparse_attention, tiled_attention
from course_lib.exercises._common import Inputs, f32, f64, gen, randn
from course_lib.grading import Case, Exercise, Slip


# 1. sliding_window_mask ------------------------------------------------------------------------


def sliding_window_mask(n: int, window: int, causal: bool = False) -> torch.Tensor:
    """Reference: the ``(n, n)`` mask of :func:`course_lib.sparse_attention.sliding_window`."""
    return sparse_attention.dense_mask(sparse_attention.sliding_window(window, causal), n)


def _window_cases() -> list[Case]:
    return [
        Case("a window of 2 on each side", lambda: {"n": 9, "window": 2, "causal": False}),
        Case("causal, a window of 3", lambda: {"n": 10, "window": 3, "causal": True}),
        Case("window 0: each token sees itself", lambda: {"n": 5, "window": 0, "causal": False}),
        Case("a window wider than the sequence", lambda: {"n": 4, "window": 7, "causal": False}),
        Case("causal, a long sequence", lambda: {"n": 64, "window": 5, "causal": True}),
        Case("one token", lambda: {"n": 1, "window": 2, "causal": True}),
    ]


def _window_slip(kind: str) -> Any:
    def mask(n, window, causal=False):
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        gap = i - j
        near = gap.abs() < window if kind == "strict" else gap.abs() <= window
        if causal:
            near = near & (gap <= 0 if kind == "future" else gap >= 0)
        return near
    return mask


_WINDOW_SLIPS = (
    Slip("a window of w keeps the keys at distance up to and including w (|i - j| <= w)",
         _window_slip("strict")),
    Slip("causal: query i sees the keys j <= i (rows are queries, columns keys)",
         _window_slip("future")),
)


# 2. bigbird_mask -------------------------------------------------------------------------------


def bigbird_mask(n: int, window: int, global_tokens: list[int], block_size: int,
                 random_blocks: list[list[int]]) -> torch.Tensor:
    """Reference: sliding window, global tokens and random key blocks, as one ``(n, n)`` mask."""
    pattern = sparse_attention.union(sparse_attention.sliding_window(window),
                                     sparse_attention.global_tokens(global_tokens))
    mask = sparse_attention.dense_mask(pattern, n)
    for row, blocks in enumerate(random_blocks):
        for col in blocks:
            mask[row * block_size:(row + 1) * block_size,
                 col * block_size:(col + 1) * block_size] = True
    return mask


def _bigbird_cases() -> list[Case]:
    def build(seed: int, n: int, window: int, n_global: int, block_size: int,
              n_random: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            n_blocks = math.ceil(n / block_size)
            chosen = torch.randperm(n, generator=g)[:n_global].tolist()
            blocks = [sorted(torch.randperm(n_blocks, generator=g)[:n_random].tolist())
                      for _ in range(n_blocks)]
            return {"n": n, "window": window, "global_tokens": chosen, "block_size": block_size,
                    "random_blocks": blocks}
        return inputs

    return [
        Case("16 tokens, blocks of 4, one global token", build(21, 16, 1, 1, 4, 1)),
        Case("30 tokens, blocks of 5, two global tokens, two random blocks",
             build(22, 30, 2, 2, 5, 2)),
        Case("a last block shorter than the others", build(23, 14, 1, 1, 4, 1)),
        Case("no global token", build(24, 12, 1, 0, 3, 1)),
        Case("no random block", build(25, 12, 2, 1, 3, 0)),
        Case("global token 0 (a [CLS] token)",
             lambda: {"n": 8, "window": 1, "global_tokens": [0], "block_size": 2,
                      "random_blocks": [[3], [0], [2], [1]]}),
    ]


def _bigbird(n, window, global_tokens, block_size, random_blocks, slip):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask = (i - j).abs() <= window
    g = torch.zeros(n, dtype=torch.bool)
    g[list(global_tokens)] = True
    mask = mask | g[None, :] if slip == "one way" else mask | g[None, :] | g[:, None]
    for row, blocks in enumerate(random_blocks):
        for col in blocks:
            if slip == "tokens":
                mask[row, col] = True
            else:
                mask[row * block_size:(row + 1) * block_size,
                     col * block_size:(col + 1) * block_size] = True
    return mask


_BIGBIRD_SLIPS = (
    Slip("a global token attends to every position too, not only the other way round",
         partial(_bigbird, slip="one way")),
    Slip("random_blocks[r] lists key blocks for query block r: set whole block_size x block_size "
         "squares, not single entries", partial(_bigbird, slip="tokens")),
)


# 3. causal_linear_attention --------------------------------------------------------------------


def _linear_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], d_v: int, dtype: torch.dtype,
              scale: float = 1.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            q = randn(seed, *shape, dtype=dtype, scale=scale)
            k = randn(seed + 1, *shape, dtype=dtype, scale=scale)
            v = randn(seed + 2, *shape[:-1], d_v, dtype=dtype)
            return {"q": q, "k": k, "v": v}
        return inputs

    return [
        Case("float32, batch 2, 4 heads", build(31, (2, 4, 12, 8), 6, f32)),
        Case("float64, batch size 1", build(34, (1, 20, 5), 3, f64)),
        Case("float32, one position", build(37, (3, 1, 4), 4, f32)),
        Case("float64, large negative and positive scores", build(40, (2, 9, 6), 5, f64, 6.0)),
        Case("float32, a longer sequence", build(43, (1, 2, 64, 16), 16, f32)),
    ]


def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))


def _linear(q, k, v, slip):
    fq, fk = (F.relu(q), F.relu(k)) if slip == "relu" else (_phi(q), _phi(k))
    s = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)    # (..., T, d, d_v)
    z = torch.cumsum(fk, dim=-2)                                     # (..., T, d)
    if slip == "exclusive":
        s, z = s - fk[..., :, None] * v[..., None, :], z - fk
    if slip == "all":
        s = s[..., -1:, :, :].expand_as(s)
        z = z[..., -1:, :].expand_as(z)
    num = (fq[..., None, :] @ s).squeeze(-2)                         # (..., T, d_v)
    if slip == "unnormalised":
        return num
    den = (fq * z).sum(-1, keepdim=True)
    return num / torch.where(den > 0, den, torch.ones_like(den))


_LINEAR_SLIPS = (
    Slip("divide by the normaliser phi(q_i)^T z_i, where z_i is the prefix sum of phi(k_j)",
         partial(_linear, slip="unnormalised")),
    Slip("causal: position i sums over the keys j <= i only, a prefix sum (cumsum), not over all "
         "positions", partial(_linear, slip="all")),
    Slip("the prefix sum includes position i itself (j <= i, not j < i)",
         partial(_linear, slip="exclusive")),
    Slip("the feature map is elu(x) + 1 (positive everywhere), not relu",
         partial(_linear, slip="relu")),
)


# 4. online_softmax_update ----------------------------------------------------------------------


def _online_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], b: int, dtype: torch.dtype,
              masked: float = 0.0, fresh: float = 0.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            m = (3 * torch.randn(*shape, generator=g, dtype=f64)).to(dtype)
            l = (1 + 4 * torch.rand(*shape, generator=g, dtype=f64)).to(dtype)
            scores = (3 * torch.randn(*shape, b, generator=g, dtype=f64)).to(dtype)
            if masked:
                scores = scores.masked_fill(torch.rand(*shape, b, generator=g) < masked,
                                            float("-inf"))
            if fresh:  # rows that have seen nothing yet: m = -inf, l = 0
                start = torch.rand(*shape, generator=g) < fresh
                m = m.masked_fill(start, float("-inf"))
                l = l.masked_fill(start, 0.0)
            return {"m": m, "l": l, "scores": scores}
        return inputs

    return [
        Case("float32, batch 2, 3 rows, blocks of 4", build(51, (2, 3), 4, f32)),
        Case("float64, batch size 1", build(52, (1, 5), 6, f64)),
        Case("float64, the first block (m = -inf, l = 0)", build(53, (4,), 3, f64, fresh=1.0)),
        Case("float32, some masked scores (-inf)", build(54, (3, 4), 8, f32, masked=0.4)),
        Case("float64, masked scores and fresh rows", build(55, (2, 6), 5, f64, 0.5, 0.5)),
    ]


def _online(m, l, scores, slip):
    m_new = torch.maximum(m, scores.amax(dim=-1))
    safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
    old = torch.exp(m - safe)
    if slip == "no rescale":
        old = torch.ones_like(old)
    if slip == "inverted":
        old = torch.exp(safe - m.clamp(min=-1e30))
    block = torch.exp(scores - safe[..., None]).sum(dim=-1)
    if slip == "block max":
        m_blk = scores.amax(dim=-1)
        block = torch.exp(scores - m_blk[..., None]).sum(dim=-1)
    return m_new, l * old + block


_ONLINE_SLIPS = (
    Slip("rescale the old sum when the maximum grows: l * exp(m - m_new)",
         partial(_online, slip="no rescale")),
    Slip("the old sum is relative to exp(m): multiply it by exp(m - m_new), which is at most 1",
         partial(_online, slip="inverted")),
    Slip("the new block's terms must be relative to the new running maximum m_new, not to the "
         "block's own maximum", partial(_online, slip="block max")),
)


# 5. query_tile_attention -----------------------------------------------------------------------


def query_tile_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: one query tile against every key block, output and log-sum-exp."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return tiled_attention.tiled_attention_forward(q, k, v, scale, block_q=q.shape[-2],
                                                   block_k=block_size)


def _tile_cases() -> list[Case]:
    def build(seed: int, batch: tuple[int, ...], n_q: int, n_k: int, d: int, d_v: int, b: int,
              dtype: torch.dtype, scale: float = 1.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"q": randn(seed, *batch, n_q, d, dtype=dtype, scale=scale),
                    "k": randn(seed + 1, *batch, n_k, d, dtype=dtype, scale=scale),
                    "v": randn(seed + 2, *batch, n_k, d_v, dtype=dtype), "block_size": b}
        return inputs

    return [
        Case("float32, batch 2, 2 heads, blocks of 4", build(61, (2, 2), 8, 16, 8, 5, 4, f32)),
        Case("float64, batch size 1, a short last block", build(64, (1,), 5, 11, 4, 3, 4, f64)),
        Case("float32, one block holds every key", build(67, (3,), 6, 7, 4, 4, 16, f32)),
        Case("float64, large scores (the running maximum matters)",
             build(70, (2,), 4, 12, 6, 2, 3, f64, 5.0)),
        Case("float32, blocks of one key", build(73, (1, 3), 3, 9, 8, 8, 1, f32)),
    ]


def _tile(q, k, v, block_size, slip):
    scale = 1.0 / math.sqrt(q.shape[-1]) if slip != "no scale" else 1.0
    s = (q @ k.transpose(-2, -1)) * scale
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ v
    if slip == "max only":
        lse = s.amax(dim=-1)
    if slip == "log l":
        lse = lse - s.amax(dim=-1)
    if slip == "unnormalised":
        out = torch.exp(s - s.amax(-1, keepdim=True)) @ v
    return out, lse


_TILE_SLIPS = (
    Slip("scale the scores by 1 / sqrt(d) before the softmax", partial(_tile, slip="no scale")),
    Slip("the log-sum-exp is m + log(l): the running maximum plus the log of the running sum",
         partial(_tile, slip="max only")),
    Slip("the log-sum-exp is m + log(l), not log(l) alone: l is relative to exp(m)",
         partial(_tile, slip="log l")),
    Slip("divide the accumulated output by the running sum l at the end",
         partial(_tile, slip="unnormalised")),
)


# 6. sparsemax ----------------------------------------------------------------------------------


def _sparsemax_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"z": randn(seed, *shape, dtype=dtype, scale=scale)}
        return inputs

    def ties() -> dict[str, Any]:
        z = torch.tensor([[1.0, 1.0, 0.2, -3.0], [0.5, 0.5, 0.5, 0.5], [2.0, 0.0, 2.0, 0.0]],
                         dtype=f64)
        return {"z": z}

    return [
        Case("float32, batch 2, 3 rows of 7", build(81, (2, 3, 7), f32, 1.0)),
        Case("float64, batch size 1", build(82, (1, 10), f64, 0.3)),
        Case("float64, spread scores (few nonzero)", build(83, (4, 12), f64, 4.0)),
        Case("float32, close scores (many nonzero)", build(84, (5, 6), f32, 0.05)),
        Case("float64, ties", ties),
        Case("float32, one score per row", build(85, (3, 1), f32, 1.0)),
    ]


def _sparsemax(z, slip):
    zs = torch.sort(z, dim=-1, descending=True).values
    cs = torch.cumsum(zs, dim=-1) - (0.0 if slip == "no minus one" else 1.0)
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    support = (r * zs > cs).sum(dim=-1, keepdim=True).clamp(min=1)
    if slip == "full support":
        support = torch.full_like(support, z.shape[-1])
    tau = cs.gather(-1, support - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0.0)


_SPARSEMAX_SLIPS = (
    Slip("sparsemax is not softmax: it gives exact zeros to scores below the threshold tau",
         lambda z: torch.softmax(z, dim=-1)),
    Slip("tau = (sum of the k largest scores - 1) / k: the weights must sum to one",
         partial(_sparsemax, slip="no minus one")),
    Slip("the support is the k largest scores with 1 + k z_(k) > sum of the k largest, not every "
         "score", partial(_sparsemax, slip="full support")),
)


# Registry --------------------------------------------------------------------------------------

EXERCISES = {ex.id: ex for ex in [
    Exercise(id="efficient_attention.sliding_window_mask", reference=sliding_window_mask,
             cases=_window_cases, slips=_WINDOW_SLIPS,
             forbidden=(sparse_attention.sliding_window, sparse_attention.dilated_window,
                        sparse_attention.dense_mask)),
    Exercise(id="efficient_attention.bigbird_mask", reference=bigbird_mask,
             cases=_bigbird_cases, slips=_BIGBIRD_SLIPS,
             forbidden=(sparse_attention.global_tokens, sparse_attention.random_blocks,
                        sparse_attention.union, sparse_attention.block_layout)),
    Exercise(id="efficient_attention.causal_linear_attention",
             reference=linear_attention.causal_linear_attention, cases=_linear_cases,
             slips=_LINEAR_SLIPS,
             forbidden=(linear_attention.kernel_attention, linear_attention.linear_attention,
                        linear_attention.linear_attention_step,
                        linear_attention.recurrent_linear_attention,
                        linear_attention.elu_feature_map)),
    Exercise(id="efficient_attention.online_softmax_update",
             reference=tiled_attention.online_softmax_update, cases=_online_cases,
             slips=_ONLINE_SLIPS, forbidden=(tiled_attention.online_softmax,)),
    Exercise(id="efficient_attention.query_tile_attention", reference=query_tile_attention,
             cases=_tile_cases, slips=_TILE_SLIPS,
             forbidden=(tiled_attention.tiled_attention_forward, tiled_attention.tiled_attention,
                        tiled_attention.TiledAttentionFunction, tiled_attention.naive_attention)),
    Exercise(id="efficient_attention.sparsemax", reference=entmax.sparsemax,
             cases=_sparsemax_cases, slips=_SPARSEMAX_SLIPS,
             forbidden=(entmax.SparsemaxFunction, entmax.entmax, entmax.entmax_bisect,
                        entmax.entmax15, entmax.entmax_attention)),
]}
