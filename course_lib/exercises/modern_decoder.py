"""Graded exercises of chapter 7, "The modern decoder": references, hidden cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the rotations of
:mod:`course_lib.rope` (and chapter 2's frequencies), RMSNorm, ``repeat_kv``, the masks, the
attention and the cache arithmetic of :mod:`course_lib.llama`, the routing and balancing loss of
:mod:`course_lib.moe`, and the verification step of :mod:`course_lib.speculative`.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only; their inputs
are plain tensors and numbers. Slips (:class:`~course_lib.grading.Slip`) are the common mistakes,
each with the message its author reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import llama, moe, positional, rope, speculative
from course_lib.exercises._common import Inputs, f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

# 1. apply_rotary: the paper's (interleaved) rotation of q or k --------------------------------


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Reference: :func:`course_lib.rope.apply_rope` with the interleaved pairing."""
    return rope.apply_rope(x, positions, theta, pairing="interleaved")


def _rotary_cases() -> list[Case]:
    def draw(seed: int, shape: tuple[int, ...], dtype: torch.dtype, start: tuple[int, int],
             theta: float) -> Inputs:
        def inputs() -> dict[str, Any]:
            first = pick(seed + 100, *start)
            return {"x": randn(seed, *shape, dtype=dtype), "theta": theta,
                    "positions": torch.arange(first, first + shape[-2])}
        return inputs

    return [
        Case("float32, (B, h, T, d) queries from position 0", draw(1, (2, 3, 7, 8), f32, (0, 0),
                                                                   10000.0)),
        Case("float64, a cache offset: positions start later", draw(2, (2, 2, 5, 16), f64,
                                                                    (20, 90), 10000.0)),
        Case("float64, batch size 1, Llama 3's theta", draw(3, (1, 4, 6, 12), f64, (0, 40),
                                                            500000.0)),
        Case("float32, one pair of features (d = 2)", draw(4, (3, 9, 2), f32, (0, 5), 100.0)),
        Case("float64, far positions", draw(5, (1, 2, 4, 8), f64, (1000, 5000), 10000.0)),
    ]


def _rotary_slip(kind: str) -> Callable[..., torch.Tensor]:
    def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
        d = x.shape[-1]
        i = torch.arange(0, d, 2, dtype=torch.float64)
        w = theta ** (-(i / 2 if kind == "theta" else i) / d)
        angle = positions.double()[:, None] * w  # (T, d/2)
        if kind == "direction":
            angle = -angle
        if kind == "from_zero":
            angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * w
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        if kind == "half":
            a, b = x[..., : d // 2], x[..., d // 2:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return rotate


_ROTARY_SLIPS = (
    Slip("the statement pairs neighbouring features (2i, 2i+1), as the paper does; you paired "
         "feature i with feature i + d/2 (Hugging Face's rotate_half layout)",
         _rotary_slip("half")),
    Slip("the frequency of pair i is theta^(-2i/d): check where i and the factor 2 go in the "
         "exponent", _rotary_slip("theta")),
    Slip("the rotation turns the wrong way: (a, b) -> (a cos - b sin, a sin + b cos)",
         _rotary_slip("direction")),
    Slip("rotate row t by its position positions[t], not by t (a cache offsets the positions)",
         _rotary_slip("from_zero")),
)


# 2. rms_norm ------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Reference: RMSNorm over the last axis (:class:`course_lib.llama.RMSNorm`)."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rms_cases() -> list[Case]:
    def draw(seed: int, shape: tuple[int, ...], dtype: torch.dtype, eps: float,
             shift: float = 0.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"x": randn(seed, *shape, dtype=dtype) + shift, "eps": eps,
                    "weight": 1 + randn(seed + 50, shape[-1], dtype=dtype, scale=0.3)}
        return inputs

    return [
        Case("float32, (B, T, d) activations", draw(1, (2, 5, 16), f32, 1e-5)),
        Case("float64, inputs with a mean far from zero", draw(2, (3, 4, 8), f64, 1e-6, 3.0)),
        Case("float64, batch size 1, a large epsilon", draw(3, (1, 6, 12), f64, 0.5)),
        Case("float32, a square (T, d) input", draw(4, (8, 8), f32, 1e-5, 1.0)),
        Case("float64, small activations: epsilon matters", draw(5, (2, 3, 10), f64, 1e-2)),
    ]


def _rms_slip(kind: str) -> Callable[..., torch.Tensor]:
    def norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
        if kind == "layernorm":
            x = x - x.mean(-1, keepdim=True)
        axis = -2 if kind == "axis" else -1
        ms = x.pow(2).mean(axis, keepdim=True)
        if kind == "eps":
            return weight * x / (ms.sqrt() + eps)
        return weight * x / torch.sqrt(ms + eps)
    return norm


_RMS_SLIPS = (
    Slip("RMSNorm subtracts no mean (that is LayerNorm): divide x itself by its root mean square",
         _rms_slip("layernorm")),
    Slip("the mean of squares runs over the features, the last axis, one value per token",
         _rms_slip("axis")),
    Slip("epsilon goes inside the square root: x / sqrt(mean(x^2) + eps)", _rms_slip("eps")),
)


# 3. grouped_query_attention ------------------------------------------------------------------


def grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Reference: causal attention, query head ``j`` reading key/value head ``j // (h / g)``."""
    rep = q.shape[1] // k.shape[1]
    k, v = llama.repeat_kv(k, rep), llama.repeat_kv(v, rep)
    T = q.shape[2]
    mask = llama.attention_mask(torch.arange(T), torch.arange(T))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _gqa_cases() -> list[Case]:
    def draw(seed: int, b: int, h: int, g: int, t: int, d: int, dtype: torch.dtype) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"q": randn(seed, b, h, t, d, dtype=dtype),
                    "k": randn(seed + 1, b, g, t, d, dtype=dtype, scale=1.5),
                    "v": randn(seed + 2, b, g, t, d, dtype=dtype)}
        return inputs

    return [
        Case("float32, 4 query heads in 2 groups", draw(10, 2, 4, 2, 6, 8, f32)),
        Case("float64, 6 query heads in 3 groups", draw(20, 2, 6, 3, 5, 4, f64)),
        Case("float64, batch size 1, multi-query (one key/value head)", draw(30, 1, 4, 1, 7, 8,
                                                                             f64)),
        Case("float32, as many key/value heads as query heads", draw(40, 2, 3, 3, 4, 6, f32)),
        Case("float64, 8 query heads in 2 groups, longer", draw(50, 1, 8, 2, 12, 4, f64)),
    ]


def _gqa_slip(kind: str) -> Callable[..., torch.Tensor]:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        h, g = q.shape[1], k.shape[1]
        if kind == "tile":
            k, v = k.repeat(1, h // g, 1, 1), v.repeat(1, h // g, 1, 1)
        else:
            k, v = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
        s = q @ k.transpose(-2, -1)
        s = s / (math.sqrt(q.shape[-1]) if kind != "scale" else q.shape[-1])
        if kind != "causal":
            T = q.shape[2]
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return s.softmax(-1) @ v
    return attend


_GQA_SLIPS = (
    Slip("the groups are in the wrong order: key/value head j serves the consecutive query heads "
         "j * (h/g) ... (j+1) * (h/g) - 1 (repeat each head, do not tile the whole set)",
         _gqa_slip("tile")),
    Slip("the attention is causal: query t sees keys 0..t only", _gqa_slip("causal")),
    Slip("scale the scores by 1/sqrt(d_head)", _gqa_slip("scale")),
)


# 4. kv_cache_bytes ----------------------------------------------------------------------------


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   batch_size: int, bytes_per_value: int, window: int | None = None) -> int:
    """Reference: the bytes of the keys and values kept
    (:func:`course_lib.llama.kv_cache_bytes`)."""
    cached = seq_len if window is None else min(seq_len, window)
    return 2 * n_layers * n_kv_heads * head_dim * cached * batch_size * bytes_per_value


def _bytes_cases() -> list[Case]:
    def draw(seed: int, window: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            seq = 2 ** pick(seed, 8, 17)
            w = {"none": None, "short": seq // 2 ** pick(seed + 1, 1, 4),
                 "long": seq * 2}[window]
            return {"n_layers": pick(seed + 2, 2, 80), "n_kv_heads": 2 ** pick(seed + 3, 0, 4),
                    "head_dim": 2 ** pick(seed + 4, 6, 8), "seq_len": seq,
                    "batch_size": pick(seed + 5, 1, 8), "bytes_per_value": [1, 2, 4][
                        pick(seed + 6, 0, 2)], "window": w}
        return inputs

    return [
        Case("full attention", draw(1, "none")),
        Case("full attention, another configuration", draw(2, "none")),
        Case("a sliding window shorter than the sequence", draw(3, "short")),
        Case("a sliding window longer than the sequence", draw(4, "long")),
        Case("a sliding window, another configuration", draw(5, "short")),
    ]


def _bytes_slip(kind: str) -> Callable[..., int]:
    def count(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int, batch_size: int,
              bytes_per_value: int, window: int | None = None) -> int:
        cached = seq_len
        if window is not None and kind != "ignore_window":
            cached = window if kind == "always_window" else min(seq_len, window)
        kv = 1 if kind == "one" else 2
        return kv * n_layers * n_kv_heads * head_dim * cached * batch_size * bytes_per_value
    return count


_BYTES_SLIPS = (
    Slip("the cache holds keys and values: two tensors per layer", _bytes_slip("one")),
    Slip("a sliding-window model keeps only the last `window` positions", _bytes_slip(
        "ignore_window")),
    Slip("a window longer than the sequence caches the sequence only: min(seq_len, window)",
         _bytes_slip("always_window")),
)


# 5. receptive_field ---------------------------------------------------------------------------


def receptive_field(n_layers: int, window: int) -> int:
    """Reference: how many positions back a token can still reach the last one, ``L (W - 1)``."""
    return n_layers * (window - 1)


def _field_cases() -> list[Case]:
    def draw(seed: int, layers: tuple[int, int], window: tuple[int, int]) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"n_layers": pick(seed, *layers), "window": pick(seed + 1, *window)}
        return inputs

    return [
        Case("one layer", draw(1, (1, 1), (2, 64))),
        Case("a few layers, a small window", draw(2, (2, 6), (2, 9))),
        Case("Mistral-sized: 32 layers, a window of thousands", draw(3, (24, 40), (2048, 8192))),
        Case("window 1: each token sees itself only", draw(4, (1, 12), (1, 1))),
    ]


_FIELD_SLIPS = (
    Slip("a window of W covers the token itself and W - 1 before it: each layer reaches W - 1 "
         "positions further back", lambda n_layers, window: n_layers * window),
    Slip("every layer extends the reach: the reaches of the layers add up",
         lambda n_layers, window: window - 1),
)


# 6. moe_route ---------------------------------------------------------------------------------


def moe_route(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor,
                                                             torch.Tensor]:
    """Reference: renormalised top-k gates, their experts, and the balancing loss (:mod:`moe`)."""
    weights, experts = moe.route(router_logits, k)
    return weights, experts, moe.load_balancing_loss(router_logits, k)


def _route_cases() -> list[Case]:
    def draw(seed: int, n: int, e: int, k: int, dtype: torch.dtype, scale: float = 1.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"router_logits": randn(seed, n, e, dtype=dtype, scale=scale), "k": k}
        return inputs

    return [
        Case("float32, 8 experts, top-2 (Mixtral)", draw(1, 12, 8, 2, f32)),
        Case("float64, 4 experts, top-1 (Switch)", draw(2, 10, 4, 1, f64)),
        Case("float64, one token, top-3", draw(3, 1, 6, 3, f64)),
        Case("float32, confident router (large logits)", draw(4, 16, 4, 2, f32, 4.0)),
        Case("float64, many tokens, 16 experts, top-4", draw(5, 40, 16, 4, f64)),
    ]


def _route_slip(kind: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    def route(router_logits: torch.Tensor,
              k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = router_logits.softmax(-1)
        top, experts = probs.topk(k, -1)
        weights = top if kind == "raw" else top / top.sum(-1, keepdim=True)
        n, e = router_logits.shape
        chosen = experts if kind != "top1" else experts[:, :1]
        f = torch.zeros(e, dtype=probs.dtype).scatter_add_(
            0, chosen.flatten(), torch.ones(chosen.numel(), dtype=probs.dtype)) / n
        p = probs.mean(0) if kind != "logits" else router_logits.mean(0)
        loss = (f * p).sum() * (1 if kind == "no_e" else e)
        return weights, experts, loss
    return route


_ROUTE_SLIPS = (
    Slip("the k gates are renormalised: divide the chosen probabilities by their sum",
         _route_slip("raw")),
    Slip("the balancing loss is multiplied by the number of experts E (so that it is k when "
         "routing is uniform)", _route_slip("no_e")),
    Slip("f_e counts every one of a token's k choices, not only its first", _route_slip("top1")),
    Slip("P_e is the mean router probability (after the softmax), not the mean logit",
         _route_slip("logits")),
)


# 7. speculative_accept ------------------------------------------------------------------------


def speculative_accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                       u: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Reference: :func:`course_lib.speculative.accept_step`."""
    return speculative.accept_step(p, q, drafts, u)


def _accept_cases() -> list[Case]:
    def draw(seed: int, k: int, v: int, dtype: torch.dtype, kind: str = "random") -> Inputs:
        def inputs() -> dict[str, Any]:
            p = randn(seed, k + 1, v, dtype=dtype, scale=1.5).softmax(-1)
            q = randn(seed + 1, k, v, dtype=dtype, scale=1.5).softmax(-1)
            if kind == "same":
                q = p[:k].clone()
            drafts = torch.multinomial(q, 1, generator=gen(seed + 2)).flatten() if k else \
                torch.zeros(0, dtype=torch.long)
            u = torch.rand(k, generator=gen(seed + 3), dtype=dtype)
            if kind == "reject":
                u = torch.full((k,), 0.999, dtype=dtype)
            return {"p": p, "q": q, "drafts": drafts, "u": u}
        return inputs

    return [
        Case("float32, 4 drafts over 6 tokens", draw(1, 4, 6, f32)),
        Case("float64, 3 drafts over 5 tokens", draw(10, 3, 5, f64)),
        Case("float64, 5 drafts, draws close to one: rejections", draw(20, 5, 4, f64, "reject")),
        Case("float32, the draft equals the target: all accepted", draw(30, 3, 7, f32, "same")),
        Case("float64, no draft: the bonus token only", draw(40, 0, 5, f64)),
        Case("float64, 2 drafts over 3 tokens", draw(50, 2, 3, f64)),
        Case("float64, 6 drafts over 8 tokens", draw(60, 6, 8, f64)),
    ]


def _accept_slip(kind: str) -> Callable[..., tuple[int, torch.Tensor]]:
    def accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
               u: torch.Tensor) -> tuple[int, torch.Tensor]:
        k = drafts.shape[0]
        for i in range(k):
            x = int(drafts[i])
            ratio = q[i, x] / p[i, x] if kind == "q_over_p" else p[i, x] / q[i, x]
            if u[i] >= ratio:
                if kind == "resample_p":
                    return i, p[i]
                residual = (q[i] - p[i] if kind == "q_minus_p" else p[i] - q[i]).clamp(min=0)
                if kind == "unnormalised":
                    return i, residual
                return i, residual / residual.sum()
        return k, p[k]
    return accept


_ACCEPT_SLIPS = (
    Slip("accept draft x with probability min(1, p(x) / q(x)), target over draft",
         _accept_slip("q_over_p")),
    Slip("after a rejection draw from the residual max(0, p - q), not from p itself",
         _accept_slip("resample_p")),
    Slip("the residual is max(0, p - q): the target's probability minus the draft's",
         _accept_slip("q_minus_p")),
    Slip("normalise the residual max(0, p - q) to sum to one", _accept_slip("unnormalised")),
)


# 8. ladder_prediction -------------------------------------------------------------------------


_LADDER_PREDICTION = Question(
    id="modern_decoder.ladder_prediction", choices="abcd",
    hint=("compare the means of the rungs with their spread across seeds in the table: one "
          "rung moves the loss by far more than the others"))


EXERCISES = {ex.id: ex for ex in [
    Exercise(id="modern_decoder.apply_rotary", reference=apply_rotary, cases=_rotary_cases,
             slips=_ROTARY_SLIPS,
             forbidden=(rope.apply_rope, rope.rope_angles, rope.inv_frequencies, rope.rotate_half,
                        rope.rope_scores, positional.frequencies, positional.sinusoidal_encoding)),
    Exercise(id="modern_decoder.rms_norm", reference=rms_norm, cases=_rms_cases,
             slips=_RMS_SLIPS, forbidden=(llama.RMSNorm,)),
    Exercise(id="modern_decoder.grouped_query_attention", reference=grouped_query_attention,
             cases=_gqa_cases, slips=_GQA_SLIPS,
             forbidden=(llama.repeat_kv, llama.attention_mask, llama.LlamaAttention)),
    Exercise(id="modern_decoder.kv_cache_bytes", reference=kv_cache_bytes, cases=_bytes_cases,
             slips=_BYTES_SLIPS, forbidden=(llama.kv_cache_bytes,)),
    Exercise(id="modern_decoder.receptive_field", reference=receptive_field, cases=_field_cases,
             slips=_FIELD_SLIPS),
    Exercise(id="modern_decoder.moe_route", reference=moe_route, cases=_route_cases,
             slips=_ROUTE_SLIPS,
             forbidden=(moe.route, moe.load_balancing_loss, moe.expert_counts,
                        moe.SparseMoeBlock)),
    Exercise(id="modern_decoder.speculative_accept", reference=speculative_accept,
             cases=_accept_cases, slips=_ACCEPT_SLIPS,
             forbidden=(speculative.accept_step, speculative.speculative_generate,
                        speculative.acceptance_probability)),
    _LADDER_PREDICTION,
]}
