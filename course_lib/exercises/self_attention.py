"""Graded exercises of chapter 2, "Self-attention": per exercise its reference, cases and slips.

Every exercise over tensors is solvable with torch alone; calling course_lib's implementation of
*any* exercise of this chapter fails it (``torch.nn.functional.scaled_dot_product_attention`` is
torch and allowed). Weights follow ``nn.Linear``'s convention: shaped ``(out, in)``, applied as
``x @ w.T``. The questions (``pe_similarity``, ``predict_one_pair``) are
functions that return a letter; their slips explain each wrong letter without naming the right
one. Cases are seeded and built on the CPU with torch and ``_common`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from course_lib import attention, multihead, positional
from course_lib.exercises._common import (
    Inputs,
    f32,
    f64,
    gen,
    lengths_mask,
    lower_triangle,
    pick,
    randn,
)
from course_lib.grading import Case, Exercise, Question, Slip

#: What an attention slip returns: (output, weights).
_Pair = tuple[torch.Tensor, torch.Tensor]
#: What a cache-step slip returns: (output, keys, values).
_Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _weights_problem(weights: np.ndarray, expected: np.ndarray,
                     mask: Any) -> str | None:
    """What is wrong with attention weights that are not one known slip (plain values only)."""
    if weights.shape != expected.shape:
        return None
    allowed = (np.ones(expected.shape, dtype=bool) if mask is None
               else np.broadcast_to(np.asarray(mask), expected.shape))
    w = weights.astype(np.float64)
    if np.isnan(w).any():
        q = int(np.argwhere(np.isnan(w))[0][-2])
        return f"the weights of query {q} contain NaN"
    leaked = ~allowed & (np.abs(w) > 1e-6)
    if leaked.any():
        index = tuple(int(i) for i in np.argwhere(leaked)[0])
        return (f"masked position (query {index[-2]}, key {index[-1]}) got weight "
                f"{w[index]:.3g}; masked keys must get exactly zero weight")
    sums, target = w.sum(axis=-1), np.asarray(allowed.any(axis=-1), dtype=np.float64)
    off = np.abs(sums - target) > 1e-4
    if off.any():
        index = tuple(int(i) for i in np.argwhere(off)[0])
        return (f"the weights of query {index[-1]} sum to {sums[index]:.3g}, not "
                f"{target[index]:g}")
    return None


def _pair_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    """(output, weights) exercises: the form of the answer, then the weights' problems."""
    if not (isinstance(got, list) and len(got) == 2
            and all(isinstance(g, np.ndarray) for g in got)):
        return "return a tuple (output, weights) of two tensors"
    mask = inputs.get("mask")
    return _weights_problem(got[1], expected[1], None if mask is None else mask.numpy())


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any = None,
            scale: float | None = None, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out for the slips (torch only, never a reference)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)
    return weights @ v, weights


# 1. score_variance ----------------------------------------------------------------------------
def score_variance(d_k: int, var_q: float = 1.0, var_k: float = 1.0, mean_q: float = 0.0,
                   mean_k: float = 0.0) -> float:
    r"""Reference: :math:`\mathrm{Var}(q \cdot k)` for independent entries of the given moments.

    Each term :math:`q_i k_i` has variance :math:`E[q_i^2] E[k_i^2] - (E q_i E k_i)^2`; the
    :math:`d_k` terms are independent, so their variances add.
    """
    per_term = (var_q + mean_q ** 2) * (var_k + mean_k ** 2) - (mean_q * mean_k) ** 2
    return float(d_k * per_term)


def _variance_cases() -> list[Case]:
    def moments(seed: int, d_k: tuple[int, int], spread: bool, means: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            draw = torch.rand(4, generator=gen(seed), dtype=f64)
            var_q, var_k = ((0.1 + 3.9 * draw[:2]).tolist() if spread else (1.0, 1.0))
            m = (-2.0 + 4.0 * draw[2:]).tolist()
            mean_q = m[0] if means in ("query", "both") else 0.0
            mean_k = m[1] if means in ("key", "both") else 0.0
            return {"d_k": pick(seed + 1, *d_k), "var_q": round(var_q, 3),
                    "var_k": round(var_k, 3), "mean_q": round(mean_q, 3),
                    "mean_k": round(mean_k, 3)}
        return inputs

    return [
        Case("unit-variance, zero-mean entries", moments(500, (2, 4096), False, "none")),
        Case("zero-mean entries of other variances", moments(510, (2, 1024), True, "none")),
        Case("a single dimension, entries with means", moments(520, (1, 1), True, "both")),
        Case("keys with a common mean, zero-mean queries", moments(530, (2, 512), True, "key")),
        Case("queries with a common mean, zero-mean keys", moments(540, (2, 512), True,
                                                                   "query")),
        Case("queries and keys both with means", moments(550, (2, 2048), True, "both")),
    ]


def _variance_slip(kind: str) -> Callable[..., float]:
    def variance(d_k: int, var_q: float = 1.0, var_k: float = 1.0, mean_q: float = 0.0,
                 mean_k: float = 0.0) -> float:
        if kind == "no_means":
            per_term = var_q * var_k
        elif kind == "second_moments":
            per_term = (var_q + mean_q ** 2) * (var_k + mean_k ** 2)
        else:  # written out: a slip never calls the reference
            per_term = var_q * var_k + var_q * mean_k ** 2 + mean_q ** 2 * var_k
        total = {"d_k_squared": d_k * d_k, "one_term": 1}.get(kind, d_k) * per_term
        return float(math.sqrt(total) if kind == "std" else total)
    return variance


_VARIANCE_SLIPS = (
    Slip("the means matter: a product q_i k_i of variables with non-zero means varies more "
         "than var_q * var_k", _variance_slip("no_means")),
    Slip("E[q_i^2] E[k_i^2] is the second moment of q_i k_i, not its variance: subtract the "
         "square of its mean", _variance_slip("second_moments")),
    Slip("return the variance, not the standard deviation", _variance_slip("std")),
    Slip("q . k is a sum of d_k terms: their variances add up", _variance_slip("one_term")),
    Slip("the d_k terms are independent: the variance of their sum grows like d_k, not d_k^2",
         _variance_slip("d_k_squared")),
)


# 2. scaled_dot_product_attention --------------------------------------------------------------
def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``(output (..., T_q, d_v), weights (..., T_q, T_k))``."""
    out, weights = attention.scaled_dot_product_attention(query, key, value, mask,
                                                          return_weights=True)
    return out, weights


def _sdpa_cases() -> list[Case]:
    def qkv(seed: int, batch: tuple[int, ...], t_q: int, t_k: int, d_k: int, d_v: int,
            dtype: torch.dtype, scale: float = 1.0) -> dict[str, Any]:
        return {"query": randn(seed, *batch, t_q, d_k, dtype=dtype, scale=scale),
                "key": randn(seed + 1, *batch, t_k, d_k, dtype=dtype, scale=scale),
                "value": randn(seed + 2, *batch, t_k, d_v, dtype=dtype)}

    def fully_masked_row() -> dict[str, Any]:
        mask = torch.rand(2, 4, 5, generator=gen(41)) < 0.6
        mask[:, :, 0] = True
        mask[0, 2] = False  # query 2 of the first sequence may attend to nothing
        return {**qkv(40, (2,), 4, 5, 3, 2, f64), "mask": mask}

    return [
        Case("float32, no mask, T_q != T_k, d_v != d_k", lambda: qkv(10, (2,), 3, 4, 5, 6, f32)),
        Case("float64, batch size 1, causal mask",
             lambda: {**qkv(20, (1,), 5, 5, 4, 4, f64), "mask": lower_triangle(5)}),
        Case("float32, (batch, heads, T, d) inputs, padded keys",
             lambda: {**qkv(30, (3, 2), 4, 6, 8, 3, f32),
                      "mask": lengths_mask([4, 1, 6], 6)[:, None, None, :]}),
        Case("float64, random mask with a fully masked query row", fully_masked_row),
        Case("float32, padding mask of shape (B, 1, T_k)",
             lambda: {**qkv(50, (2,), 2, 7, 6, 5, f32),
                      "mask": lengths_mask([7, 3], 7)[:, None, :]}),
        Case("float64, 2-D inputs without a batch dimension", lambda: qkv(60, (), 3, 3, 4, 2, f64)),
        Case("float32, large scores (numerical stability)",
             lambda: qkv(70, (2,), 4, 4, 16, 3, f32, scale=12.0)),
    ]


def _sdpa_unscaled(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   mask: torch.Tensor | None = None) -> _Pair:
    return _attend(query, key, value, mask, scale=1.0)


def _sdpa_by_d_v(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 mask: torch.Tensor | None = None) -> _Pair:
    return _attend(query, key, value, mask, scale=1.0 / math.sqrt(value.shape[-1]))


def _sdpa_no_mask(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  mask: torch.Tensor | None = None) -> _Pair:
    return _attend(query, key, value)


def _sdpa_nan_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   mask: torch.Tensor | None = None) -> _Pair:
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # 0/0 = NaN where every key is masked
    return weights @ value, weights


def _sdpa_over_queries(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: torch.Tensor | None = None) -> _Pair:
    return _attend(query, key, value, mask, dim=-2)


def _sdpa_naive_exp(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    mask: torch.Tensor | None = None) -> _Pair:
    e = torch.exp(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]))  # overflows
    if mask is not None:
        e = e * mask
    weights = e / e.sum(-1, keepdim=True)
    return weights @ value, weights


_SDPA_SLIPS = (
    Slip("the weights are softmax(Q K^T): divide the scores by sqrt(d_k) first", _sdpa_unscaled),
    Slip("you divided the scores by sqrt(d_v); the scale is sqrt(d_k), the size of queries and "
         "keys", _sdpa_by_d_v),
    Slip("masked keys got weight: fill their scores with -inf before the softmax", _sdpa_no_mask),
    Slip("a query whose every key is masked must get all-zero weights and output, not NaN "
         "(the softmax of a row of -inf is 0/0)", _sdpa_nan_rows),
    Slip("the softmax runs over the queries; normalise each query's scores over the keys (the "
         "last axis)", _sdpa_over_queries),
    Slip("the weights overflow for large scores: subtract each row's maximum before "
         "exponentiating (torch.softmax does)", _sdpa_naive_exp),
)


# 3. cached_attention_step ---------------------------------------------------------------------
def _step_cases() -> list[Case]:
    def step(seed: int, B: int, t: int, d_model: int, d_k: int, d_v: int, dtype: torch.dtype,
             scale: float = 1.0) -> dict[str, Any]:
        w = scale / math.sqrt(d_model)
        return {"x": randn(seed, B, d_model, dtype=dtype),
                "w_q": randn(seed + 1, d_k, d_model, dtype=dtype, scale=w),
                "w_k": randn(seed + 2, d_k, d_model, dtype=dtype, scale=w),
                "w_v": randn(seed + 3, d_v, d_model, dtype=dtype, scale=w),
                "cache_k": randn(seed + 4, B, t, d_k, dtype=dtype, scale=scale),
                "cache_v": randn(seed + 5, B, t, d_v, dtype=dtype)}

    return [
        Case("float32, five cached tokens, d_k != d_v != d_model",
             lambda: step(100, 2, 5, 8, 4, 3, f32)),
        Case("float64, batch size 1, empty cache (the first token)",
             lambda: step(110, 1, 0, 6, 4, 5, f64)),
        Case("float32, square weights (d_k = d_v = d_model)",
             lambda: step(120, 3, 3, 6, 6, 6, f32)),
        Case("float64, one cached token, d_v > d_model", lambda: step(130, 2, 1, 4, 2, 7, f64)),
        Case("float32, long cache, large scores", lambda: step(140, 2, 20, 16, 8, 8, f32, 3.0)),
        Case("float64, batch size 1, square weights", lambda: step(150, 1, 4, 5, 5, 5, f64)),
    ]


def _step_with(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
               cache_k: torch.Tensor, cache_v: torch.Tensor, *, transpose: bool = True,
               self_too: bool = True, scale: float | None = None, prepend: bool = False) -> _Step:
    """The cache step written out, with switches for the slips (torch only)."""
    proj: Callable[[torch.Tensor], torch.Tensor] = ((lambda w: x @ w.T) if transpose
                                                    else (lambda w: x @ w))
    q, k, v = proj(w_q), proj(w_k), proj(w_v)
    if prepend:
        new_k = torch.cat([k[:, None], cache_k], 1)
        new_v = torch.cat([v[:, None], cache_v], 1)
    else:
        new_k = torch.cat([cache_k, k[:, None]], 1)
        new_v = torch.cat([cache_v, v[:, None]], 1)
    keys, values = (new_k, new_v) if self_too else (cache_k, cache_v)
    y, _ = _attend(q[:, None], keys, values, scale=scale)
    return y[:, 0], new_k, new_v


def _step_x_at_w(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                 cache_k: torch.Tensor, cache_v: torch.Tensor) -> _Step:
    return _step_with(x, w_q, w_k, w_v, cache_k, cache_v, transpose=False)


def _step_not_itself(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                     cache_k: torch.Tensor, cache_v: torch.Tensor) -> _Step:
    return _step_with(x, w_q, w_k, w_v, cache_k, cache_v, self_too=False)


def _step_by_d_model(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                     cache_k: torch.Tensor, cache_v: torch.Tensor) -> _Step:
    return _step_with(x, w_q, w_k, w_v, cache_k, cache_v, scale=1.0 / math.sqrt(x.shape[-1]))


def _step_prepended(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                    cache_k: torch.Tensor, cache_v: torch.Tensor) -> _Step:
    return _step_with(x, w_q, w_k, w_v, cache_k, cache_v, prepend=True)


def _step_old_caches(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                     cache_k: torch.Tensor, cache_v: torch.Tensor) -> _Step:
    y, _, _ = _step_with(x, w_q, w_k, w_v, cache_k, cache_v)
    return y, cache_k, cache_v


_STEP_SLIPS = (
    Slip("weights are shaped (out, in) and applied as x @ w.T (nn.Linear's convention); you "
         "applied x @ w", _step_x_at_w),
    Slip("the output of the new token is not causal attention's output at its position: check "
         "over which keys and values it attends", _step_not_itself),
    Slip("divide the scores by sqrt(d_k), the size of the keys, not by sqrt(d_model)",
         _step_by_d_model),
    Slip("append the new key and value at the end of the caches (position t), after the "
         "cached tokens", _step_prepended),
    Slip("return the caches with the new key and value appended, shaped (B, t + 1, ...), not "
         "the caches you were given", _step_old_caches),
)


# 4. kv_cache_cost ------------------------------------------------------------------------------
def kv_cache_cost(T: int) -> tuple[int, int]:
    """Reference: the query-key scores of ``T`` decoding steps, ``(with the cache, without)``.

    Exact integers for any ``T >= 1`` (the hidden cases go up to about ``10^15``).
    """
    return T * (T + 1) // 2, T * (T + 1) * (2 * T + 1) // 6


def _cost_cases() -> list[Case]:
    def steps(seed: int, low: int, high: int) -> Inputs:
        return lambda: {"T": pick(seed, low, high)}

    return [
        Case("one step", lambda: {"T": 1}),
        Case("a few steps", steps(600, 2, 12)),
        Case("a sentence", steps(610, 13, 200)),
        Case("a long context", steps(620, 1_000, 100_000)),
        Case("a context too long for float64 to count exactly", steps(630, 10 ** 7, 10 ** 8)),
        # a loop over the steps cannot finish within the grader's 60 s per cell: a closed form
        Case("a context no loop over the steps can count in time",
             steps(640, 10 ** 14, 10 ** 15)),
    ]


def _cost_slip(kind: str) -> Callable[..., tuple[int, int]]:
    def count(T: int) -> tuple[int, int]:
        with_cache = {"one_per_step": T, "not_itself": T * (T - 1) // 2}.get(kind, T * (T + 1) // 2)
        without = (T * (T + 1) * (T + 2) // 6 if kind == "triangle"
                   else T * (T + 1) * (2 * T + 1) // 6)
        if kind == "leading":
            return round(T ** 2 / 2), round(T ** 3 / 3)
        return with_cache, without
    return count


_COST_SLIPS = (
    Slip("with the cache, step t still scores its query against every cached key, not one",
         _cost_slip("one_per_step")),
    Slip("with the cache, the new token's query is scored against its own key too: step t has "
         "t keys", _cost_slip("not_itself")),
    Slip("without the cache the statement counts the whole t x t matrix of step t, masked "
         "entries included", _cost_slip("triangle")),
    Slip("the counts are exact integers, not their leading terms", _cost_slip("leading")),
)


# 5. multi_head_attention ----------------------------------------------------------------------
def multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                         w_o: torch.Tensor, n_heads: int, mask: torch.Tensor | None = None,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``(output (B, T_q, d_out), weights (B, h, T_q, T_k))``."""
    return multihead.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _mha_cases() -> list[Case]:
    def build(seed: int, B: int, t_q: int, t_k: int, d_in: int, d_mem: int, d: int,
              d_out: int, h: int, dtype: torch.dtype, mask: torch.Tensor | None = None,
              self_attention: bool = False) -> dict[str, Any]:
        query = randn(seed, B, t_q, d_in, dtype=dtype)
        memory = query if self_attention else randn(seed + 1, B, t_k, d_mem, dtype=dtype)
        inputs = {"query": query, "key": memory, "value": memory,
                  "w_q": randn(seed + 3, d, d_in, dtype=dtype, scale=d_in ** -0.5),
                  "w_k": randn(seed + 4, d, d_mem, dtype=dtype, scale=d_mem ** -0.5),
                  "w_v": randn(seed + 5, d, d_mem, dtype=dtype, scale=d_mem ** -0.5),
                  "w_o": randn(seed + 6, d_out, d, dtype=dtype, scale=d ** -0.5),
                  "n_heads": h}
        if mask is not None:
            inputs["mask"] = mask
        return inputs

    def fully_masked() -> dict[str, Any]:
        mask = lower_triangle(4)[None, None].repeat(2, 1, 1, 1)  # (B, 1, T_q, T_k)
        mask[1, 0, 3] = False  # the last query of the second sequence sees nothing
        return build(340, 2, 4, 4, 6, 6, 6, 6, 3, f64, mask, self_attention=True)

    return [
        Case("float32, self-attention, square weights, 2 heads",
             lambda: build(300, 2, 5, 5, 8, 8, 8, 8, 2, f32, self_attention=True)),
        Case("float64, cross-attention to a memory of another width, T_q != T_k, 4 heads",
             lambda: build(310, 2, 3, 6, 8, 6, 8, 8, 4, f64)),
        Case("float32, batch size 1, one head", lambda: build(320, 1, 4, 4, 6, 6, 6, 6, 1, f32)),
        Case("float32, self-attention, causal mask, 4 heads",
             lambda: build(330, 3, 5, 5, 12, 12, 12, 12, 4, f32, lower_triangle(5),
                           self_attention=True)),
        Case("float64, causal mask with a fully masked query row, 3 heads", fully_masked),
        Case("float32, key padding mask (B, 1, 1, T_k), attention width != model width",
             lambda: build(350, 2, 3, 5, 6, 5, 8, 6, 2, f32,
                           lengths_mask([5, 2], 5)[:, None, None, :])),
    ]


def _mha_with(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, w_q: torch.Tensor,
              w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int,
              mask: torch.Tensor | None = None, *, transpose: bool = True, scale_by_d: bool = False,
              split: str = "blocks", merge_transposes: bool = True,
              project_out: bool = True) -> _Pair:
    """Multi-head attention written out, with switches for the slips (torch only)."""
    proj: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (
        (lambda x, w: x @ w.T) if transpose else (lambda x, w: x @ w))

    def heads(x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        if split == "strided":
            return x.view(B, T, d // n_heads, n_heads).permute(0, 3, 1, 2)
        if split == "reshape":
            return x.reshape(B, n_heads, T, d // n_heads)
        return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)

    q, k, v = heads(proj(query, w_q)), heads(proj(key, w_k)), heads(proj(value, w_v))
    scale = 1.0 / math.sqrt(q.shape[-1] * (n_heads if scale_by_d else 1))
    out, weights = _attend(q, k, v, mask, scale=scale)
    B, h, T_q, d_head = out.shape
    merged = (out.transpose(1, 2) if merge_transposes else out).reshape(B, T_q, h * d_head)
    return (proj(merged, w_o) if project_out else merged), weights


def _mha_x_at_w(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, w_q: torch.Tensor,
                w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int,
                mask: torch.Tensor | None = None) -> _Pair:
    return _mha_with(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask, transpose=False)


def _mha_by_d(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, w_q: torch.Tensor,
              w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int,
              mask: torch.Tensor | None = None) -> _Pair:
    return _mha_with(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask, scale_by_d=True)


def _mha_strided(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, w_q: torch.Tensor,
                 w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int,
                 mask: torch.Tensor | None = None) -> _Pair:
    return _mha_with(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask, split="strided")


def _mha_reshaped(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, w_q: torch.Tensor,
                  w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int,
                  mask: torch.Tensor | None = None) -> _Pair:
    return _mha_with(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask, split="reshape")


def _mha_merge_reshaped(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor,
                        n_heads: int, mask: torch.Tensor | None = None) -> _Pair:
    return _mha_with(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask,
                     merge_transposes=False)


_MHA_SLIPS = (
    Slip("weights are shaped (out, in) and applied as x @ w.T (nn.Linear's convention); you "
         "applied x @ w", _mha_x_at_w),
    Slip("divide each head's scores by sqrt(d_head) = sqrt(d / n_heads), not by sqrt(d)",
         _mha_by_d),
    Slip("head i owns the contiguous features i*d_head:(i+1)*d_head of each projection, not "
         "every h-th feature", _mha_strided),
    Slip("split with view(B, T, h, d_head) and then swap the T and h axes; reshaping straight "
         "to (B, h, T, d_head) mixes positions into heads", _mha_reshaped),
    Slip("merge the heads back with transpose(1, 2) before the reshape to (B, T_q, d); "
         "reshaping (B, h, T_q, d_head) directly mixes positions", _mha_merge_reshaped),
)


# 6. sinusoidal_encoding -----------------------------------------------------------------------
def sinusoidal_encoding(n_positions: int, d_model: int,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Reference: ``(n_positions, d_model)`` in ``dtype``."""
    return positional.sinusoidal_encoding(n_positions, d_model, dtype=dtype)


def _sinusoidal_cases() -> list[Case]:
    def sizes(n: int, d: int, dt: torch.dtype) -> Inputs:
        return lambda: {"n_positions": n, "d_model": d, "dtype": dt}

    specs = [("float32, one position, d_model 2", 1, 2, f32, 1e-4),
             ("float32, 10 positions, d_model 16", 10, 16, f32, 1e-4),
             ("float64, 50 positions, d_model 64", 50, 64, f64, None),
             ("float32, 128 positions, d_model 6", 128, 6, f32, 1e-4),
             ("float64, 7 positions, d_model 32", 7, 32, f64, None)]
    return [Case(name, sizes(n, d, dt), atol=atol)
            for name, n, d, dt, atol in specs] + [
        Case("float64, a size drawn for this grading run", lambda: {
            "n_positions": pick(301, 3, 60), "d_model": 2 * pick(302, 2, 20), "dtype": f64})]


def _table(n_positions: int, d_model: int, exponent: torch.Tensor) -> torch.Tensor:
    t = torch.arange(n_positions, dtype=f64)[:, None]
    return t * 10000.0 ** (-exponent / d_model)


def _pe_swapped(n_positions: int, d_model: int, dtype: torch.dtype = f32) -> torch.Tensor:
    angles = _table(n_positions, d_model, torch.arange(0, d_model, 2, dtype=f64))
    return torch.stack([angles.cos(), angles.sin()], -1).reshape(n_positions, d_model).to(dtype)


def _pe_blocked(n_positions: int, d_model: int, dtype: torch.dtype = f32) -> torch.Tensor:
    angles = _table(n_positions, d_model, torch.arange(0, d_model, 2, dtype=f64))
    return torch.cat([angles.sin(), angles.cos()], dim=1).to(dtype)


def _pe_pair_index(n_positions: int, d_model: int, dtype: torch.dtype = f32) -> torch.Tensor:
    angles = _table(n_positions, d_model, torch.arange(d_model // 2, dtype=f64))
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(n_positions, d_model).to(dtype)


_PE_SLIPS = (
    Slip("sines go in the even columns (2i) and cosines in the odd columns (2i+1)", _pe_swapped),
    Slip("interleave the two: column 2i is the sine and column 2i+1 the cosine of the same "
         "frequency, not all sines followed by all cosines", _pe_blocked),
    Slip("the frequency of pair i is 10000^(-2i/d_model): the exponent counts the column 2i, "
         "not the pair index i", _pe_pair_index),
)


# 7. relative_position_map ---------------------------------------------------------------------
def relative_position_map(shift: int, d_model: int,
                          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Reference: ``(d_model, d_model)`` matrix ``M`` with ``pe[t + shift] == M @ pe[t]``."""
    return positional.relative_position_map(shift, d_model, dtype=dtype)


def _relative_cases() -> list[Case]:
    def shifted(s: int, d: int, dt: torch.dtype) -> Inputs:
        return lambda: {"shift": s, "d_model": d, "dtype": dt}

    specs = [("float32, shift 0", 0, 8, f32),
             ("float32, shift 1, d_model 2", 1, 2, f32),
             ("float64, shift 5, d_model 16", 5, 16, f64),
             ("float64, negative shift, d_model 8", -3, 8, f64),
             ("float32, shift 12, d_model 32", 12, 32, f32)]
    return [Case(name, shifted(s, d, dt))
            for name, s, d, dt in specs] + [
        Case("float64, a shift and size drawn for this grading run", lambda: {
            "shift": pick(401, -30, 30), "d_model": 2 * pick(402, 2, 12), "dtype": f64})]


def _rotation(shift: int, d_model: int, dtype: torch.dtype, upper: float,
              lower: float) -> torch.Tensor:
    """Block-diagonal 2 x 2 blocks [[cos, upper * sin], [lower * sin, cos]] (torch only)."""
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=f64) / d_model)
    c, s = torch.cos(shift * omega), torch.sin(shift * omega)
    m = torch.zeros(d_model, d_model, dtype=f64)
    m[0::2, 0::2], m[1::2, 1::2] = torch.diag(c), torch.diag(c)
    m[0::2, 1::2], m[1::2, 0::2] = torch.diag(upper * s), torch.diag(lower * s)
    return m.to(dtype)


def _map_transposed(shift: int, d_model: int, dtype: torch.dtype = f32) -> torch.Tensor:
    return _rotation(shift, d_model, dtype, upper=-1.0, lower=1.0)


def _map_same_signs(shift: int, d_model: int, dtype: torch.dtype = f32) -> torch.Tensor:
    return _rotation(shift, d_model, dtype, upper=1.0, lower=1.0)


_MAP_SLIPS = (
    Slip("this is the transpose of M_s: the map acts on column vectors, pe[t + shift] == "
         "M @ pe[t] (for rows, pe[t] @ M.T)", _map_transposed),
    Slip("check the signs of the 2 x 2 blocks: sin(a + b) = sin a cos b + cos a sin b and "
         "cos(a + b) = cos a cos b - sin a sin b", _map_same_signs),
)


# 8. pe_similarity (question) ------------------------------------------------------------------
_PE_SIMILARITY = Question(
    id="self_attention.pe_similarity", choices="abcd",
    hint=("expand the dot product pair by pair with sin(x)sin(y) + cos(x)cos(y) = cos(x - "
          "y): what is left of t, and how does a sum of cos(omega_i s) over the frequencies "
          "behave as s grows?"))


# 9. predict_one_pair (question) ---------------------------------------------------------------
_PREDICT_ONE_PAIR = Question(
    id="self_attention.predict_one_pair", choices="abcd",
    hint=("with one pair in the sequence, what must the GRU carry from the pair to the "
          "query, and can a gated state hold it unchanged across many steps?"))


EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="self_attention.score_variance", reference=score_variance,
             cases=_variance_cases, slips=_VARIANCE_SLIPS),
    Exercise(id="self_attention.scaled_dot_product_attention",
             reference=scaled_dot_product_attention, cases=_sdpa_cases, slips=_SDPA_SLIPS,
             forbidden=(attention.scaled_dot_product_attention, attention.masked_softmax),
             diagnose=_pair_diagnose),
    Exercise(id="self_attention.cached_attention_step", reference=attention.cached_attention_step,
             cases=_step_cases, slips=_STEP_SLIPS),
    Exercise(id="self_attention.kv_cache_cost", reference=kv_cache_cost, cases=_cost_cases,
             slips=_COST_SLIPS),
    Exercise(id="self_attention.multi_head_attention", reference=multi_head_attention,
             cases=_mha_cases, slips=_MHA_SLIPS, diagnose=_pair_diagnose,
             forbidden=(multihead.multi_head_attention, multihead.MultiHeadAttention,
                        multihead.split_heads, multihead.merge_heads)),
    Exercise(id="self_attention.sinusoidal_encoding", reference=sinusoidal_encoding,
             cases=_sinusoidal_cases, slips=_PE_SLIPS,
             forbidden=(positional.sinusoidal_encoding, positional.frequencies,
                        positional.SinusoidalPositionalEncoding)),
    Exercise(id="self_attention.relative_position_map", reference=relative_position_map,
             cases=_relative_cases, slips=_MAP_SLIPS,
             forbidden=(positional.relative_position_map,)),
    _PE_SIMILARITY,
    _PREDICT_ONE_PAIR,
]}
