"""Graded exercises of chapter 2, "Self-attention": references, hidden cases, points, diagnoses.

Every exercise is solvable with torch alone. Calling course_lib's implementation of *any*
exercise of this chapter (``course_lib.attention.scaled_dot_product_attention``,
``masked_softmax``, ``causal_mask``, ``course_lib.multihead.*``, ``course_lib.positional.*``
...) fails the exercise; ``torch.nn.functional.scaled_dot_product_attention`` is torch and allowed
(but it does not return the weights, and it does not give zeros for a query whose every key is
masked on every backend).

Cases are built on the CPU from seeded ``torch.Generator``s; their names say what they cover,
never the values. Diagnoses explain a mismatch in the exercise's own terms without revealing the
inputs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import torch

from course_lib import attention, multihead, positional
from course_lib.grading import Case, Exercise

# --------------------------------------------------------------------------------------------
# References: course_lib's implementations, called with the exercise's signature
# --------------------------------------------------------------------------------------------


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``(output (..., T_q, d_v), weights (..., T_q, T_k))``."""
    out, weights = attention.scaled_dot_product_attention(query, key, value, mask,
                                                          return_weights=True)
    return out, weights


def causal_mask(n_queries: int, n_keys: int) -> torch.Tensor:
    """Reference: ``(n_queries, n_keys)`` bool; the queries are the last positions."""
    return attention.causal_mask(n_queries, n_keys=n_keys)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reference: ``(B, T, d)`` to ``(B, h, T, d / h)``."""
    return multihead.split_heads(x, n_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Reference: ``(B, h, T, d_head)`` to ``(B, T, h * d_head)``."""
    return multihead.merge_heads(x)


def multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                         w_o: torch.Tensor, n_heads: int, mask: torch.Tensor | None = None,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``(output (B, T_q, d), weights (B, h, T_q, T_k))``."""
    return multihead.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def sinusoidal_encoding(n_positions: int, d_model: int,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Reference: ``(n_positions, d_model)`` in ``dtype``."""
    return positional.sinusoidal_encoding(n_positions, d_model, dtype=dtype)


def relative_position_map(shift: int, d_model: int,
                          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Reference: ``(d_model, d_model)`` matrix ``M`` with ``pe[t + shift] == M @ pe[t]``."""
    return positional.relative_position_map(shift, d_model, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Hidden cases
# --------------------------------------------------------------------------------------------


def _lower_triangle(n: int) -> torch.Tensor:
    """A causal mask built with torch alone: the graded ``causal_mask`` reference stays out of
    the input builders, so the grader's sandbox can remove its body like the others'."""
    return torch.ones(n, n, dtype=torch.bool).tril()


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _sdpa_cases() -> list[Case]:
    f32, f64 = torch.float32, torch.float64

    def qkv(seed: int, batch: tuple[int, ...], t_q: int, t_k: int, d_k: int, d_v: int,
            dtype: torch.dtype, scale: float = 1.0) -> dict[str, Any]:
        return {"query": scale * _randn(seed, *batch, t_q, d_k, dtype=dtype),
                "key": scale * _randn(seed + 1, *batch, t_k, d_k, dtype=dtype),
                "value": _randn(seed + 2, *batch, t_k, d_v, dtype=dtype)}

    def no_mask() -> dict[str, Any]:
        return qkv(10, (2,), 3, 4, 5, 6, f32)

    def batch_one_causal() -> dict[str, Any]:
        return {**qkv(20, (1,), 5, 5, 4, 4, f64), "mask": _lower_triangle(5)}

    def heads_padding() -> dict[str, Any]:
        lengths = torch.tensor([4, 1, 6])
        mask = attention.padding_mask(lengths, 6)[:, None, None, :]  # (B, 1, 1, T_k)
        return {**qkv(30, (3, 2), 4, 6, 8, 3, f32), "mask": mask}

    def fully_masked_row() -> dict[str, Any]:
        mask = torch.rand(2, 4, 5, generator=torch.Generator().manual_seed(41)) < 0.6
        mask[:, :, 0] = True
        mask[0, 2] = False  # query 2 of the first sequence may attend to nothing
        return {**qkv(40, (2,), 4, 5, 3, 2, f64), "mask": mask}

    def cross_lengths() -> dict[str, Any]:
        mask = attention.padding_mask(torch.tensor([7, 3]), 7)[:, None, :]  # (B, 1, T_k)
        return {**qkv(50, (2,), 2, 7, 6, 5, f32), "mask": mask}

    def no_batch() -> dict[str, Any]:
        return qkv(60, (), 3, 3, 4, 2, f64)

    def large_scores() -> dict[str, Any]:
        return qkv(70, (2,), 4, 4, 16, 3, f32, scale=12.0)

    return [Case("float32, no mask, T_q != T_k, d_v != d_k", no_mask),
            Case("float64, batch size 1, causal mask", batch_one_causal),
            Case("float32, (batch, heads, T, d) inputs, padded keys", heads_padding),
            Case("float64, random mask with a fully masked query row", fully_masked_row),
            Case("float32, one query per key set, padding mask of shape (B, 1, T_k)",
                 cross_lengths),
            Case("float64, 2-D inputs without a batch dimension", no_batch),
            Case("float32, large scores (numerical stability)", large_scores)]


def _causal_cases() -> list[Case]:
    sizes = [(1, 1), (4, 4), (3, 7), (1, 5), (6, 6), (5, 8)]
    names = ["a single position", "square 4 x 4", "3 queries, 7 keys (cached keys)",
             "one new query, 5 keys", "square 6 x 6", "5 queries, 8 keys"]
    return [Case(name, (lambda q=q, k=k: {"n_queries": q, "n_keys": k}))
            for name, (q, k) in zip(names, sizes)]


def _split_cases() -> list[Case]:
    specs = [("float32, 2 heads", 0, (2, 3, 8), 2, torch.float32),
             ("float64, batch size 1, 4 heads", 1, (1, 5, 12), 4, torch.float64),
             ("float32, one head", 2, (3, 2, 6), 1, torch.float32),
             ("float32, one feature per head", 3, (2, 4, 6), 6, torch.float32),
             ("float64, a single position, 3 heads", 4, (2, 1, 9), 3, torch.float64)]
    return [Case(name, (lambda s=s, shape=shape, h=h, dt=dt:
                        {"x": _randn(100 + s, *shape, dtype=dt), "n_heads": h}))
            for name, s, shape, h, dt in specs]


def _merge_cases() -> list[Case]:
    specs = [("float32, 2 heads", 0, (2, 2, 3, 4), torch.float32),
             ("float64, batch size 1, 4 heads", 1, (1, 4, 5, 3), torch.float64),
             ("float32, one head", 2, (3, 1, 2, 6), torch.float32),
             ("float32, head size 1", 3, (2, 6, 4, 1), torch.float32),
             ("float64, a single position, 3 heads", 4, (2, 3, 1, 3), torch.float64)]
    return [Case(name, (lambda s=s, shape=shape, dt=dt: {"x": _randn(200 + s, *shape, dtype=dt)}))
            for name, s, shape, dt in specs]


def _mha_cases() -> list[Case]:
    f32, f64 = torch.float32, torch.float64

    def build(seed: int, batch: int, t_q: int, t_k: int, d: int, h: int, dtype: torch.dtype,
              mask: torch.Tensor | None = None, self_attention: bool = False) -> dict[str, Any]:
        query = _randn(seed, batch, t_q, d, dtype=dtype)
        key = query if self_attention else _randn(seed + 1, batch, t_k, d, dtype=dtype)
        value = query if self_attention else _randn(seed + 2, batch, t_k, d, dtype=dtype)
        w = [_randn(seed + 3 + i, d, d, dtype=dtype) / math.sqrt(d) for i in range(4)]
        inputs = {"query": query, "key": key, "value": value, "w_q": w[0], "w_k": w[1],
                  "w_v": w[2], "w_o": w[3], "n_heads": h}
        if mask is not None:
            inputs["mask"] = mask
        return inputs

    def fully_masked() -> dict[str, Any]:
        mask = _lower_triangle(4)[None, None].repeat(2, 1, 1, 1)  # (B, 1, T_q, T_k)
        mask[1, 0, 3] = False  # the last query of the second sequence sees nothing
        return build(340, 2, 4, 4, 6, 3, f64, mask, self_attention=True)

    return [
        Case("float32, self-attention, 2 heads", lambda: build(300, 2, 5, 5, 8, 2, f32,
                                                               self_attention=True)),
        Case("float64, cross-attention T_q != T_k, 4 heads",
             lambda: build(310, 2, 3, 6, 8, 4, f64)),
        Case("float32, batch size 1, one head", lambda: build(320, 1, 4, 4, 6, 1, f32)),
        Case("float32, self-attention, causal mask, 4 heads",
             lambda: build(330, 3, 5, 5, 12, 4, f32, _lower_triangle(5),
                           self_attention=True)),
        Case("float64, causal mask with a fully masked query row, 3 heads", fully_masked),
        Case("float32, key padding mask of shape (B, 1, 1, T_k), 2 heads",
             lambda: build(350, 2, 3, 5, 8, 2, f32,
                           attention.padding_mask(torch.tensor([5, 2]))[:, None, None, :])),
    ]


def _sinusoidal_cases() -> list[Case]:
    specs = [("float32, one position, d_model 2", 1, 2, torch.float32, 1e-4),
             ("float32, 10 positions, d_model 16", 10, 16, torch.float32, 1e-4),
             ("float64, 50 positions, d_model 64", 50, 64, torch.float64, None),
             ("float32, 128 positions, d_model 6", 128, 6, torch.float32, 1e-4),
             ("float64, 7 positions, d_model 32", 7, 32, torch.float64, None)]
    return [Case(name, (lambda n=n, d=d, dt=dt: {"n_positions": n, "d_model": d, "dtype": dt}),
                 atol=atol)
            for name, n, d, dt, atol in specs]


def _relative_cases() -> list[Case]:
    specs = [("float32, shift 0", 0, 8, torch.float32),
             ("float32, shift 1, d_model 2", 1, 2, torch.float32),
             ("float64, shift 5, d_model 16", 5, 16, torch.float64),
             ("float64, negative shift, d_model 8", -3, 8, torch.float64),
             ("float32, shift 12, d_model 32", 12, 32, torch.float32)]
    return [Case(name, (lambda s=s, d=d, dt=dt: {"shift": s, "d_model": d, "dtype": dt}))
            for name, s, d, dt in specs]


# --------------------------------------------------------------------------------------------
# Diagnoses: explain a mismatch without revealing the inputs
# --------------------------------------------------------------------------------------------


def _as_numpy(value: Any) -> np.ndarray | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    return None


def _pair(got: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if (isinstance(got, list) and len(got) == 2 and all(isinstance(g, np.ndarray) for g in got)):
        return got[0], got[1]
    return None


def _weights_problem(weights: np.ndarray, expected: np.ndarray,
                     mask: np.ndarray | None) -> str | None:
    """Masked keys that got weight, rows that do not sum to one, NaN: the first problem found."""
    if weights.shape != expected.shape:
        return None
    allowed = (np.ones(expected.shape, dtype=bool) if mask is None
               else np.broadcast_to(mask, expected.shape))
    has_key = allowed.any(axis=-1)
    w = weights.astype(np.float64)
    nan = np.isnan(w)
    if nan.any():
        index = np.argwhere(nan)[0]
        q = int(index[-2])
        if not has_key[tuple(index[:-1])]:
            return (f"query {q} may attend to no key (every key is masked): its weights and "
                    f"output must be all zeros, not NaN")
        return (f"the weights of query {q} contain NaN: subtract the row maximum before "
                f"exponentiating (or use torch.softmax), and mask with -inf only where needed")
    leaked = ~allowed & (np.abs(w) > 1e-6)
    if leaked.any():
        index = tuple(np.argwhere(leaked)[0])
        batch = f" in batch entry {index[:-2]}" if len(index) > 2 else ""
        return (f"masked position (q={index[-2]}, k={index[-1]}) got weight "
                f"{w[index]:.3g}{batch}; masked keys must get exactly zero weight")
    sums = w.sum(axis=-1)
    target = has_key.astype(np.float64)
    off = np.abs(sums - target) > 1e-4
    if off.any():
        index = tuple(np.argwhere(off)[0])
        batch = f" in batch entry {index[:-1]}" if len(index) > 1 else ""
        if target[index] == 0:
            return (f"query {index[-1]}{batch} may attend to no key, so its weights must all be "
                    f"zero; they sum to {sums[index]:.3g}")
        return (f"row {index[-1]} of the weights{batch} sums to {sums[index]:.3g}, not one; "
                f"normalise over the keys (the last axis)")
    return None


def _unscaled_softmax(inputs: Mapping[str, Any], mask: np.ndarray | None) -> np.ndarray | None:
    q, k = _as_numpy(inputs.get("query")), _as_numpy(inputs.get("key"))
    if q is None or k is None:
        return None
    scores = (q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2))
    if mask is not None:
        scores = np.where(np.broadcast_to(mask, scores.shape), scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def _diagnose_sdpa(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    pair = _pair(got)
    if pair is None:
        return "return a tuple (output, weights) of two tensors"
    out, weights = pair
    exp_out, exp_weights = expected
    mask = _as_numpy(inputs.get("mask"))
    problem = _weights_problem(weights, exp_weights, mask)
    if problem:
        return problem
    if weights.shape == exp_weights.shape and not np.allclose(weights, exp_weights, atol=1e-4):
        unscaled = _unscaled_softmax(inputs, mask)
        if unscaled is not None and np.allclose(weights, unscaled, atol=1e-4):
            return "the weights are softmax(Q K^T): divide the scores by sqrt(d_k) first"
        return "the weights are valid distributions but not softmax(Q K^T / sqrt(d_k))"
    if weights.shape == exp_weights.shape and out.shape == exp_out.shape:
        return "the weights are right but the output is not: it is weights @ value"
    return None


def _diagnose_mha(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    pair = _pair(got)
    if pair is None:
        return "return a tuple (output, weights) of two tensors"
    out, weights = pair
    exp_out, exp_weights = expected
    problem = _weights_problem(weights, exp_weights, _as_numpy(inputs.get("mask")))
    if problem:
        return problem
    if weights.shape == exp_weights.shape:
        wrong = [h for h in range(weights.shape[1])
                 if not np.allclose(weights[:, h], exp_weights[:, h], atol=1e-4)]
        if wrong:
            return (f"the attention weights of head {wrong[0]} are wrong: head i uses features "
                    f"i*d_head:(i+1)*d_head of query @ w_q and key @ w_k, and scores divided by "
                    f"sqrt(d_head)")
        if out.shape == exp_out.shape:
            return ("the weights are right but the output is not: concatenate the heads back "
                    "(head i in features i*d_head:(i+1)*d_head) and multiply by w_o")
    return None


def _diagnose_causal(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return None
    if got.dtype != np.bool_:
        return f"the mask must be a torch.bool tensor (True = may attend), got {got.dtype}"
    future = got & ~expected
    if future.any():
        q, k = (int(i) for i in np.argwhere(future)[0])
        return f"query {q} may attend to key {k}, which comes after it"
    hidden = ~got & expected
    if hidden.any():
        q, k = (int(i) for i in np.argwhere(hidden)[0])
        return (f"query {q} cannot attend to key {k}, which is not in its future; the queries "
                f"are the last n_queries of the n_keys positions")
    return None


def _diagnose_split(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray):
        return None
    B, h, T, d_head = expected.shape
    if got.shape == (B, T, h, d_head):
        return "the head axis must come second: (B, h, T, d_head); transpose after reshaping"
    if got.shape == expected.shape:
        x = _as_numpy(inputs.get("x"))
        if x is not None:
            strided = x.reshape(B, T, d_head, h).transpose(0, 3, 1, 2)  # every h-th feature
            no_transpose = x.reshape(B, h, T, d_head)
            if np.allclose(got, strided):
                return ("head i must take the contiguous features i*d_head:(i+1)*d_head, not "
                        "every h-th feature")
            if np.allclose(got, no_transpose):
                return ("reshape to (B, T, h, d_head) first, then swap the T and h axes; "
                        "reshaping straight to (B, h, T, d_head) mixes positions")
    return None


def _diagnose_merge(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray):
        return None
    x = _as_numpy(inputs.get("x"))
    if x is not None and got.shape == expected.shape:
        B, h, T, d_head = x.shape
        if np.allclose(got, x.reshape(B, T, h * d_head)):
            return ("move the head axis next to the features first (B, T, h, d_head), then "
                    "reshape; reshaping (B, h, T, d_head) directly mixes positions")
    return None


def _diagnose_sinusoidal(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return None
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    if np.isnan(g).any():
        return "the encoding contains NaN"
    swapped = e.reshape(len(e), -1, 2)[..., ::-1].reshape(e.shape)
    if e.shape[1] >= 2 and np.allclose(g, swapped, atol=1e-4):
        return "sines go in the even columns (2i) and cosines in the odd columns (2i+1)"
    half = e.shape[1] // 2
    blocked = np.concatenate([e[:, 0::2], e[:, 1::2]], axis=1)
    if half > 1 and np.allclose(g, blocked, atol=1e-4):
        return ("interleave the two: column 2i is sin and column 2i+1 is cos of the same "
                "frequency, not all sines followed by all cosines")
    if e.shape[0] > 1 and not np.allclose(g[0], e[0], atol=1e-4):
        return "position 0 must be (0, 1, 0, 1, ...): sin(0) and cos(0)"
    return ("the frequencies look wrong: columns 2i and 2i+1 share the frequency "
            "1 / 10000^(2i / d_model)")


def _diagnose_relative(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return None
    if np.allclose(got, expected.T, atol=1e-5):
        return ("this is the transpose: the map acts on column vectors, pe[t + shift] == "
                "M @ pe[t] (for rows, pe[t] @ M.T)")
    d = expected.shape[0]
    off_block = np.ones((d, d), dtype=bool)
    for i in range(0, d, 2):
        off_block[i:i + 2, i:i + 2] = False
    if np.abs(got[off_block]).max(initial=0.0) > 1e-6:
        return ("M is block diagonal: each pair (sin, cos) of one frequency only mixes with "
                "itself, through a 2 x 2 rotation by the angle shift * frequency")
    return ("check the signs of the 2 x 2 blocks: sin(a + b) = sin a cos b + cos a sin b, "
            "cos(a + b) = cos a cos b - sin a sin b")


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

_ALL_FORBIDDEN: tuple[Callable[..., Any], ...] = (
    attention.scaled_dot_product_attention, attention.masked_softmax, attention.causal_mask,
    multihead.split_heads, multihead.merge_heads, multihead.multi_head_attention,
    multihead.MultiHeadAttention, positional.sinusoidal_encoding, positional.frequencies,
    positional.relative_position_map, positional.SinusoidalPositionalEncoding,
)

EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="self_attention.scaled_dot_product_attention",
             reference=scaled_dot_product_attention, cases=_sdpa_cases,
             forbidden=(attention.scaled_dot_product_attention, attention.masked_softmax),
             diagnose=_diagnose_sdpa),
    Exercise(id="self_attention.causal_mask", reference=causal_mask,
             cases=_causal_cases, forbidden=(attention.causal_mask,), diagnose=_diagnose_causal),
    Exercise(id="self_attention.split_heads", reference=split_heads,
             cases=_split_cases, forbidden=(multihead.split_heads,), diagnose=_diagnose_split),
    Exercise(id="self_attention.merge_heads", reference=merge_heads,
             cases=_merge_cases, forbidden=(multihead.merge_heads,), diagnose=_diagnose_merge),
    Exercise(id="self_attention.multi_head_attention", reference=multi_head_attention, cases=_mha_cases,
             forbidden=(multihead.multi_head_attention, multihead.MultiHeadAttention),
             diagnose=_diagnose_mha),
    Exercise(id="self_attention.sinusoidal_encoding", reference=sinusoidal_encoding,
             cases=_sinusoidal_cases,
             forbidden=(positional.sinusoidal_encoding, positional.frequencies,
                        positional.SinusoidalPositionalEncoding),
             diagnose=_diagnose_sinusoidal),
    Exercise(id="self_attention.relative_position_map", reference=relative_position_map, cases=_relative_cases, forbidden=(positional.relative_position_map,),
             diagnose=_diagnose_relative),
]}

#: Points of the chapter, as the title cell states them.
