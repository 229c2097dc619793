"""Graded exercises of chapter 3, "The Transformer": per exercise its reference, cases and slips.

In notebook order; the ``EXERCISES`` registry is at the end. Every exercise is solvable with torch
alone, and calling course_lib's implementation of any of them (the references below, the modules
they wrap, chapter 2's attention) fails the exercise. Any torch is allowed, and the statements say
so: ``F.layer_norm`` for ``layer_norm``, ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` for the two layer exercises (warm-ups). No exercise needs a
course_lib module in the grading sandbox (no ``SANDBOX_MODULES``).

Two exercises ask for something no cell gives: ``given_reads`` (the notebook hands out
``given_self_attention``, whose heads are cut across positions, ``reshape(B, h, T, dh)``; the
student catches it with a test of their own and returns, for any length and number of heads,
which input positions each output reads: the diagnosis, which no torch layer computes, with
hidden lengths up to 2,500 where perturbing a copy position by position does not finish) and
``design_layer`` (the widest layer of a variant torch has no layer for, grouped keys and values
and a gated FFN, within a parameter budget, its parameter count and its causal forward FLOPs,
exact integers).

Weights are in ``nn.Linear``'s layout, ``y = x W^T + b`` with ``W`` shaped ``(out, in)``; hidden
cases use non-square, non-symmetric random weights, so a transposed weight changes the output.

Cases are built on the CPU with torch and ``_common``'s seeded helpers alone. Slips (the common
mistakes) are torch-only wrong implementations: they never call a reference.

``mask_tokens`` is random, so it is graded by its properties, not its draws:
:func:`~course_lib.exercises._calls.mask_tokens_draws` runs the student's function over many seeded
draws in the sandbox, and :func:`mask_tokens_verdicts` turns the draws into plain verdicts on the
trusted side (labels only where selected, special positions never selected, the selected
fraction and the 80/10/10 split within five standard errors), which the reference also meets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import attention, counting, lm, multihead, transformer
from course_lib.exercises._calls import mask_tokens_draws
from course_lib.exercises._common import f32, f64, gen, lengths_mask, lower_triangle, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

Inputs = Callable[[], dict[str, Any]]


# 1. feed_forward -----------------------------------------------------------------------------


def feed_forward(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                 b2: torch.Tensor) -> torch.Tensor:
    """Reference: ``relu(x w1^T + b1) w2^T + b2``, computed by course_lib's ``FeedForward``."""
    d_ff, d = w1.shape
    ff = transformer.FeedForward(d, d_ff).to(x.dtype)
    with torch.no_grad():
        for lin, w, b in ((ff.linear1, w1, b1), (ff.linear2, w2, b2)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        out: torch.Tensor = ff(x)
        return out


def _feed_forward_cases() -> list[Case]:
    def build(seed: int, lead: tuple[int, ...], d: int, d_ff: int, dtype: torch.dtype) -> Inputs:
        return lambda: {"x": randn(seed, *lead, d, dtype=dtype),
                        "w1": randn(seed + 1, d_ff, d, dtype=dtype, scale=d ** -0.5),
                        "b1": randn(seed + 2, d_ff, dtype=dtype, scale=0.1),
                        "w2": randn(seed + 3, d, d_ff, dtype=dtype, scale=d_ff ** -0.5),
                        "b2": randn(seed + 4, d, dtype=dtype, scale=0.1)}

    return [Case("float32, (batch, length, d)", build(100, (2, 5), 8, 32, f32)),
            Case("float64, batch size 1", build(110, (1, 3), 4, 6, f64)),
            Case("float32, a 2-D input (length, d)", build(120, (7,), 6, 24, f32)),
            Case("float64, 4-D input", build(130, (2, 3, 2), 5, 7, f64))]


_FEED_FORWARD_SLIPS = (
    Slip("the ReLU between the two linear maps is missing",
         lambda x, w1, b1, w2, b2: (x @ w1.T + b1) @ w2.T + b2),
    Slip("b1 is missing: it goes inside the ReLU, relu(x @ w1.T + b1)",
         lambda x, w1, b1, w2, b2: torch.relu(x @ w1.T) @ w2.T + b2),
    Slip("b2 is missing: add it after the second map",
         lambda x, w1, b1, w2, b2: torch.relu(x @ w1.T + b1) @ w2.T),
)


# 2. layer_norm -------------------------------------------------------------------------------


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Reference: LayerNorm over the last dimension (biased variance, eps inside the root)."""
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def _layer_norm_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, eps: float | None,
              scale: float = 1.0, shift: float = 0.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            d = shape[-1]
            out = {"x": randn(seed, *shape, dtype=dtype, scale=scale) + shift,
                   "gamma": 1.0 + randn(seed + 1, d, dtype=dtype, scale=0.3),
                   "beta": randn(seed + 2, d, dtype=dtype, scale=0.3)}
            return out if eps is None else {**out, "eps": eps}
        return inputs

    return [Case("float32, (batch, length, d), default eps", build(200, (2, 5, 8), f32, None)),
            Case("float64, batch size 1, eps=0.1", build(210, (1, 4, 6), f64, 0.1)),
            Case("float32, large offset and scale", build(220, (3, 16), f32, 1e-5, 10.0, 50.0)),
            Case("float64, 4-D input, small rows", build(230, (2, 3, 2, 4), f64, 1e-3, 0.05))]


def _normalise(x: torch.Tensor, var: torch.Tensor, eps: float, eps_inside: bool = True
               ) -> torch.Tensor:
    centred = x - x.mean(-1, keepdim=True)
    return centred / (torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps)


_LAYER_NORM_SLIPS = (
    Slip("you used the unbiased variance: divide by d, not d - 1 (unbiased=False)",
         lambda x, gamma, beta, eps=1e-5:
             _normalise(x, x.var(-1, keepdim=True, unbiased=True), eps) * gamma + beta),
    Slip("eps belongs inside the square root: (x - mean) / sqrt(var + eps)",
         lambda x, gamma, beta, eps=1e-5: _normalise(
             x, x.var(-1, keepdim=True, unbiased=False), eps, eps_inside=False) * gamma + beta),
    Slip("the normalised values must be scaled by gamma and shifted by beta",
         lambda x, gamma, beta, eps=1e-5: _normalise(x, x.var(-1, keepdim=True, unbiased=False),
                                                     eps)),
)


# Shared by the two layer exercises: random weights in nn.Linear layout, and torch-only slips -----

_ATTENTION = ("q", "k", "v", "o")


def _layer_params(seed: int, d: int, d_ff: int, dtype: torch.dtype, cross: bool
                  ) -> dict[str, torch.Tensor]:
    """Random non-symmetric weights of an encoder layer (``cross=False``) or a decoder layer."""
    prefixes = [("w", "b")] + ([("wc", "bc")] if cross else [])
    params: dict[str, torch.Tensor] = {}
    k = seed
    for w, b in prefixes:
        for name in _ATTENTION:
            params[f"{w}_{name}"] = randn(k, d, d, dtype=dtype, scale=d ** -0.5)
            params[f"{b}_{name}"] = randn(k + 1, d, dtype=dtype, scale=0.1)
            k += 2
    params |= {"w_1": randn(k, d_ff, d, dtype=dtype, scale=d ** -0.5),
               "b_1": randn(k + 1, d_ff, dtype=dtype, scale=0.1),
               "w_2": randn(k + 2, d, d_ff, dtype=dtype, scale=d_ff ** -0.5),
               "b_2": randn(k + 3, d, dtype=dtype, scale=0.1)}
    for i in range(1, 4 if cross else 3):
        params[f"gamma_{i}"] = 1.0 + randn(k + 3 + 2 * i, d, dtype=dtype, scale=0.2)
        params[f"beta_{i}"] = randn(k + 4 + 2 * i, d, dtype=dtype, scale=0.2)
    return params


def _attend(q_in: torch.Tensor, kv_in: torch.Tensor, p: dict[str, torch.Tensor], w: str, b: str,
            h: int, mask: torch.Tensor | None, slip: str) -> torch.Tensor:
    """Multi-head attention written out in torch, with one mistake named by ``slip``."""
    B, T, d = q_in.shape
    S, dh = kv_in.shape[1], d // h

    def proj(z: torch.Tensor, name: str) -> torch.Tensor:
        weight = p[f"{w}_{name}"]
        return z @ (weight if slip == "untransposed" else weight.T) + p[f"{b}_{name}"]

    def heads(z: torch.Tensor, n: int) -> torch.Tensor:
        if slip == "head split":  # (B, n, d) read as (B, h, n, dh): heads cut across positions
            return z.reshape(B, h, n, dh)
        return z.reshape(B, n, h, dh).transpose(1, 2)  # (B, h, n, dh)

    q, k, v = heads(proj(q_in, "q"), T), heads(proj(kv_in, "k"), S), heads(proj(kv_in, "v"), S)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d if slip == "sqrt d" else dh)  # (B, h, T, S)
    if mask is not None:
        allowed = ~mask if slip == "inverted mask" else mask
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    out = scores.softmax(-1) @ v  # (B, h, T, dh)
    out = out.reshape(B, T, d) if slip == "head split" else out.transpose(1, 2).reshape(B, T, d)
    return proj(out, "o")


def _ffn(z: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.relu(z @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]


def _residual(x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor],
              p: dict[str, torch.Tensor], i: int, norm_first: bool) -> torch.Tensor:
    def ln(z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), p[f"gamma_{i}"], p[f"beta_{i}"], 1e-5)
    return x + f(ln(x)) if norm_first else ln(x + f(x))


# 3. encoder_layer ----------------------------------------------------------------------------


def encoder_layer(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
                  mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
    """Reference: :class:`~course_lib.transformer.EncoderLayer` (dropout 0) with ``params``."""
    d, d_ff = x.shape[-1], params["w_1"].shape[0]
    layer = transformer.EncoderLayer(d, n_heads, d_ff, norm_first=norm_first,
                                     attn_impl="reference").to(x.dtype).eval()
    _load_layer(layer, params, [(layer.self_attn, "w", "b")], 2)
    out: torch.Tensor
    with torch.no_grad():
        out, _ = layer(x, None if mask is None else mask[:, None])  # (B, 1, T, T): all heads
    return out


def _load_layer(layer: transformer.EncoderLayer | transformer.DecoderLayer,
                params: dict[str, torch.Tensor],
                attentions: list[tuple[multihead.MultiHeadAttention, str, str]],
                n_norms: int) -> None:
    with torch.no_grad():
        for attn, w, b in attentions:
            for lin, name in ((attn.q_proj, "q"), (attn.k_proj, "k"), (attn.v_proj, "v"),
                              (attn.out_proj, "o")):
                lin.weight.copy_(params[f"{w}_{name}"])
                lin.bias.copy_(params[f"{b}_{name}"])
        for lin, i in ((layer.ff.linear1, 1), (layer.ff.linear2, 2)):
            lin.weight.copy_(params[f"w_{i}"])
            lin.bias.copy_(params[f"b_{i}"])
        for i in range(1, n_norms + 1):
            getattr(layer, f"norm{i}").weight.copy_(params[f"gamma_{i}"])
            getattr(layer, f"norm{i}").bias.copy_(params[f"beta_{i}"])


def _random_mask(seed: int, B: int, T: int) -> torch.Tensor:
    """``(B, T, T)`` random pattern in which every query keeps itself (no row fully masked)."""
    return (torch.rand(B, T, T, generator=gen(seed)) > 0.4) | torch.eye(T, dtype=torch.bool)


def _encoder_layer_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, d: int, h: int, d_ff: int, dtype: torch.dtype,
              masked: bool, norm_first: bool) -> Inputs:
        return lambda: {"x": randn(seed, B, T, d, dtype=dtype),
                        "params": _layer_params(seed + 1, d, d_ff, dtype, cross=False),
                        "n_heads": h, "mask": _random_mask(seed + 99, B, T) if masked else None,
                        "norm_first": norm_first}

    return [Case("float32, post-norm, no mask", build(300, 2, 5, 8, 2, 16, f32, False, False)),
            Case("float32, pre-norm, masked", build(330, 2, 6, 8, 4, 12, f32, True, True)),
            Case("float64, batch size 1, post-norm, masked",
                 build(360, 1, 4, 6, 3, 10, f64, True, False)),
            Case("float64, pre-norm, one head", build(390, 3, 3, 4, 1, 8, f64, False, True))]


def _encoder_slip(slip: str) -> Callable[..., torch.Tensor]:
    def layer(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
              mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
        h = 1 if slip == "one head" else n_heads
        first = (not norm_first) if slip == "swapped norm" else norm_first
        x = _residual(x, lambda z: _attend(z, z, params, "w", "b", h, mask, slip), params, 1,
                      first)
        return _residual(x, lambda z: _ffn(z, params), params, 2, first)
    return layer


_ENCODER_LAYER_SLIPS = (
    Slip("the attention weights must be applied as nn.Linear does, z @ w_q.T + b_q (w is "
         "(out, in))", _encoder_slip("untransposed")),
    Slip("the heads are cut wrongly: head i owns features i*d/h to (i+1)*d/h of every position; "
         "reshape (B, T, d) to (B, T, h, d/h), then transpose to (B, h, T, d/h)",
         _encoder_slip("head split")),
    Slip("scale the scores by 1/sqrt(d/h), the width of one head, not 1/sqrt(d)",
         _encoder_slip("sqrt d")),
    Slip("the heads are not split: n_heads heads of d/h features each", _encoder_slip("one head")),
    Slip("the mask looks inverted: True means 'may attend' (fill the scores with -inf where the "
         "mask is False)", _encoder_slip("inverted mask")),
    Slip("pre-norm and post-norm are swapped: norm_first=True means x + f(LN(x))",
         _encoder_slip("swapped norm")),
)


# 4. decoder_masks ----------------------------------------------------------------------------


def decoder_masks(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: the decoder's self-attention ``(B, T, T)`` and cross-attention ``(B, T, S)``
    masks."""
    T = tgt_padding.shape[1]
    self_mask = lm.gpt_attention_mask(tgt_padding)[:, 0]  # (B, T, T)
    cross_mask = transformer.key_padding_mask(src_padding)[:, 0].expand(-1, T, -1)  # (B, T, S)
    return self_mask, cross_mask


def _decoder_masks_cases() -> list[Case]:
    def build(src_lengths: list[int], S: int, tgt_lengths: list[int], T: int) -> Inputs:
        return lambda: {"src_padding": lengths_mask(src_lengths, S),
                        "tgt_padding": lengths_mask(tgt_lengths, T)}

    return [Case("no padding", build([4, 4], 4, [3, 3], 3)),
            Case("padded sources and targets", build([5, 2, 3], 5, [4, 1, 2], 4)),
            Case("batch size 1, source shorter than target", build([2], 2, [6], 6)),
            Case("batch size 1, padded target", build([3], 4, [2], 5)),
            Case("sizes and lengths drawn for this grading run", _drawn_decoder_masks)]


def _drawn_decoder_masks() -> dict[str, Any]:
    B, S, T = pick(281, 2, 4), pick(282, 2, 7), pick(283, 2, 7)
    src = torch.randint(1, S + 1, (B,), generator=gen(284)).tolist()
    tgt = torch.randint(1, T + 1, (B,), generator=gen(285)).tolist()
    return {"src_padding": lengths_mask(src, S), "tgt_padding": lengths_mask(tgt, T)}


def _masks(src_padding: torch.Tensor, tgt_padding: torch.Tensor, causal: torch.Tensor,
           tgt_keys: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    B, T = tgt_padding.shape
    keys = tgt_padding[:, None, :] if tgt_keys else torch.ones(B, 1, T, dtype=torch.bool)
    return causal[None] & keys, src_padding[:, None, :].expand(B, T, src_padding.shape[1])


_DECODER_MASKS_SLIPS = (
    Slip("the masks are inverted: in course_lib True means 'may attend' (torch.nn's convention "
         "is the opposite)",
         lambda src_padding, tgt_padding: tuple(~m for m in _masks(
             src_padding, tgt_padding, lower_triangle(tgt_padding.shape[1])))),
    Slip("the self-attention mask must be causal: query i may attend to keys j <= i",
         lambda src_padding, tgt_padding: _masks(
             src_padding, tgt_padding, torch.ones_like(lower_triangle(tgt_padding.shape[1])))),
    Slip("the causal mask is transposed: query i may attend to keys j <= i (the lower triangle)",
         lambda src_padding, tgt_padding: _masks(
             src_padding, tgt_padding, lower_triangle(tgt_padding.shape[1]).T)),
    Slip("the self-attention mask must also hide padded target keys",
         lambda src_padding, tgt_padding: _masks(
             src_padding, tgt_padding, lower_triangle(tgt_padding.shape[1]), tgt_keys=False)),
)


# 5. given_reads: which inputs the given decoder attention reads --------------------------------


def given_reads(T: int, n_heads: int) -> torch.Tensor:
    """Reference: the input positions each output of the notebook's ``given_self_attention`` reads.

    ``given_self_attention`` cuts its heads with ``reshape(B, h, T, dh)``: row ``r`` of head ``i``
    holds the features of position ``(i T + r) // h``, and the causal mask then keeps rows
    ``r <= t`` for output ``t``. Returns a boolean ``(T, T)`` tensor, ``[t, j]`` True when the
    output at ``t`` changes with the input at ``j`` (weights in general position, no padding).

    Example:
        >>> given_reads(4, 2).int().tolist()
        [[1, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    """
    rows = torch.arange(T)
    held = (torch.arange(n_heads)[:, None] * T + rows[None, :]) // n_heads  # (h, T)
    row_reads = torch.zeros(T, T, dtype=torch.bool)
    row_reads[rows.repeat(n_heads), held.flatten()] = True  # (rows, positions)
    reads: torch.Tensor = row_reads.int().cummax(0).values.bool()  # output t: rows 0..t
    return reads


def _given_reads_cases() -> list[Case]:
    def drawn(seed: int, low: int, high: int, heads: tuple[int, int]) -> Inputs:
        return lambda: {"T": pick(seed, low, high), "n_heads": pick(seed + 1, *heads)}

    return [Case("two heads, a short sequence", drawn(400, 5, 12, (2, 2))),
            Case("one head", drawn(410, 2, 40, (1, 1))),
            Case("more heads than positions", drawn(420, 2, 5, (6, 9))),
            Case("heads that do not divide the length", lambda: {
                "T": 7 * pick(430, 3, 30) + 1, "n_heads": 7}),
            Case("sizes drawn for this grading run", drawn(440, 20, 300, (2, 16))),
            Case("a long sequence", drawn(450, 1500, 2500, (3, 16)))]


def _reads_slip(slip: str) -> Callable[..., torch.Tensor]:
    def wrong(T: int, n_heads: int) -> torch.Tensor:
        if slip == "causal":
            return torch.ones(T, T, dtype=torch.bool).tril()
        # "transposed": the right map, its axes swapped (a copy: a slip never calls a reference)
        rows = torch.arange(T)
        held = (torch.arange(n_heads)[:, None] * T + rows[None, :]) // n_heads
        row_reads = torch.zeros(T, T, dtype=torch.bool)
        row_reads[rows.repeat(n_heads), held.flatten()] = True
        return (row_reads.int().cumsum(0) > 0).T.contiguous()
    return wrong


_GIVEN_READS_SLIPS = (
    Slip("that is what a correct decoder reads (j <= t); the given function reads more: "
         "look at what its reshape puts in each head's rows", _reads_slip("causal")),
    Slip("rows and columns are swapped: [t, j] is True when the OUTPUT at t reads the INPUT at j",
         _reads_slip("transposed")),
)


# 6. decoder_layer ----------------------------------------------------------------------------


def decoder_layer(y: torch.Tensor, memory: torch.Tensor, params: dict[str, torch.Tensor],
                  n_heads: int, self_mask: torch.Tensor | None, cross_mask: torch.Tensor | None,
                  norm_first: bool) -> torch.Tensor:
    """Reference: :class:`~course_lib.transformer.DecoderLayer` (dropout 0) with ``params``."""
    d, d_ff = y.shape[-1], params["w_1"].shape[0]
    layer = transformer.DecoderLayer(d, n_heads, d_ff, norm_first=norm_first,
                                     attn_impl="reference").to(y.dtype).eval()
    _load_layer(layer, params, [(layer.self_attn, "w", "b"), (layer.cross_attn, "wc", "bc")], 3)
    out: torch.Tensor
    with torch.no_grad():
        out, _ = layer(y, memory, None if self_mask is None else self_mask[:, None],
                       None if cross_mask is None else cross_mask[:, None])
    return out


def _decoder_layer_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, S: int, d: int, h: int, d_ff: int, dtype: torch.dtype,
              tgt_lengths: list[int] | None, src_lengths: list[int] | None,
              norm_first: bool) -> Inputs:
        def inputs() -> dict[str, Any]:
            tgt = lengths_mask(tgt_lengths or [T] * B, T)
            self_mask = lower_triangle(T)[None] & tgt[:, None, :]  # (B, T, T)
            cross_mask = (None if src_lengths is None
                          else lengths_mask(src_lengths, S)[:, None, :].expand(B, T, S))
            return {"y": randn(seed, B, T, d, dtype=dtype),
                    "memory": randn(seed + 1, B, S, d, dtype=dtype),
                    "params": _layer_params(seed + 2, d, d_ff, dtype, cross=True),
                    "n_heads": h, "self_mask": self_mask, "cross_mask": cross_mask,
                    "norm_first": norm_first}
        return inputs

    return [Case("float32, post-norm, padded sources",
                 build(500, 2, 5, 7, 8, 2, 16, f32, None, [7, 3], False)),
            Case("float32, pre-norm, padded targets and sources",
                 build(540, 3, 6, 4, 12, 3, 20, f32, [6, 4, 2], [4, 2, 3], True)),
            Case("float64, batch size 1, post-norm, no source padding",
                 build(580, 1, 4, 6, 6, 3, 10, f64, None, None, False)),
            Case("float64, pre-norm, source shorter than target",
                 build(620, 2, 6, 3, 8, 4, 12, f64, [6, 5], [3, 1], True))]


def _decoder_slip(slip: str) -> Callable[..., torch.Tensor]:
    def layer(y: torch.Tensor, memory: torch.Tensor, params: dict[str, torch.Tensor],
              n_heads: int, self_mask: torch.Tensor | None, cross_mask: torch.Tensor | None,
              norm_first: bool) -> torch.Tensor:
        first = (not norm_first) if slip == "swapped norm" else norm_first
        s_mask = None if slip == "no self mask" else self_mask
        c_mask = None if slip == "no cross mask" else cross_mask
        kv = (lambda z: z) if slip == "kv from y" else (lambda z: memory)
        cross = ("w", "b") if slip == "shared weights" else ("wc", "bc")
        y = _residual(y, lambda z: _attend(z, z, params, "w", "b", n_heads, s_mask, ""), params,
                      1, first)
        y = _residual(y, lambda z: _attend(z, kv(z), params, *cross, n_heads, c_mask, ""),
                      params, 2, first)
        return _residual(y, lambda z: _ffn(z, params), params, 3, first)
    return layer


_DECODER_LAYER_SLIPS = (
    Slip("cross-attention takes its queries from y but its keys and values from memory, the "
         "encoder's output", _decoder_slip("kv from y")),
    Slip("the decoder's self-attention must use self_mask: without it a position sees the "
         "future", _decoder_slip("no self mask")),
    Slip("cross-attention must use cross_mask, so that no query attends to a padded source key",
         _decoder_slip("no cross mask")),
    Slip("cross-attention has its own weights, wc_q ... wc_o and bc_q ... bc_o",
         _decoder_slip("shared weights")),
    Slip("pre-norm and post-norm are swapped: norm_first=True means y + f(LN(y))",
         _decoder_slip("swapped norm")),
)


# 7. ffn_share (a question) -------------------------------------------------------------------


_FFN_SHARE = Question(
    id="transformer.ffn_share", choices="abcd",
    hint=("count both blocks: attention has four d x d projections; the FFN has two maps "
          "between d and d_ff = 4 d features"))


# 8. design_layer: the widest grouped-query, gated layer in a parameter budget ---------------------


def _layer_count(d: int, kv: int, d_ff: int, seq_len: int, slip: str = "") -> tuple[int, int]:
    """``(params, flops)`` of one layer of exercise 8's variant: queries and output ``d x d``,
    keys and values ``kv x d``, a gated FFN of three maps; ``slip`` names one mistake."""
    if slip == "full keys":
        kv = d
    biases = slip != "no biases"
    attn = 2 * d * d + 2 * kv * d + (2 * d + 2 * kv if biases else 0)
    maps = 2 if slip == "two ffn maps" else 3
    ffn = maps * d * d_ff + ((maps - 1) * d_ff + d if biases else 0)
    norms = 0 if slip == "no norms" else 4 * d
    T = seq_len
    pairs = T * T if slip == "full square" else T * (T + 1) // 2  # (query, key) pairs computed
    scores = 0 if slip == "no scores" else 2 * (2 * pairs * d)  # q.k and the weighted values
    flops = 2 * T * (2 * d * d + 2 * kv * d) + scores + 2 * T * maps * d * d_ff
    return attn + ffn + norms, flops // 2 if slip == "one per multiply-add" else flops


def design_layer(budget: int, head_dim: int, group: int, ff_mult: int, seq_len: int
                 ) -> dict[str, int] | None:
    """Reference: the widest layer of exercise 8's variant with at most ``budget`` parameters.

    ``n_heads`` query heads of width ``head_dim`` (a multiple of ``group``), one key and one value
    head per ``group`` query heads; ``d_ff = ff_mult * d_model``; every map with a bias, two
    LayerNorms. ``flops``: 2 per multiply-add of the matrix products of one forward pass over
    ``seq_len`` tokens, the attention over the pairs the causal mask keeps. ``None`` when not
    even ``group`` heads fit.
    """
    best = None
    m = 1
    while True:
        h = m * group
        d, kv = h * head_dim, m * head_dim
        params, flops = _layer_count(d, kv, ff_mult * d, seq_len)
        if params > budget:
            return best
        best = {"n_heads": h, "n_kv_heads": m, "d_model": d, "d_ff": ff_mult * d,
                "params": params, "flops": flops}
        m += 1


def _design(budget: int, head_dim: int, group: int, ff_mult: int, seq_len: int, slip: str
            ) -> dict[str, int] | None:
    """:func:`design_layer` with the mistake ``slip``, for the slips (trusted side)."""
    best = None
    m = 1
    while True:
        h = m * group
        d, kv = h * head_dim, m * head_dim
        params, flops = _layer_count(d, kv, ff_mult * d, seq_len, slip)
        fits = params < budget if slip == "strict" else params <= budget
        if not fits:
            return best
        best = {"n_heads": h, "n_kv_heads": m, "d_model": d, "d_ff": ff_mult * d,
                "params": params, "flops": flops}
        m += 1


def _design_cases() -> list[Case]:
    def exact(seed: int, below: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            head_dim, group = 8 * pick(seed, 1, 8), pick(seed + 1, 1, 8)
            ff_mult, m = pick(seed + 2, 1, 4), pick(seed + 4, 1, 12)
            d = m * group * head_dim
            params, _ = _layer_count(d, m * head_dim, ff_mult * d, 1)
            return {"budget": params - below, "head_dim": head_dim, "group": group,
                    "ff_mult": ff_mult, "seq_len": pick(seed + 3, 1, 2048)}
        return inputs

    def drawn(seed: int, low: int, high: int) -> Inputs:
        return lambda: {"budget": pick(seed, low, high), "head_dim": 2 ** pick(seed + 1, 1, 7),
                        "group": pick(seed + 4, 2, 8), "ff_mult": pick(seed + 2, 1, 8),
                        "seq_len": pick(seed + 3, 1, 4096)}

    return [Case("a small budget", drawn(700, 2_000, 200_000)),
            Case("a budget of millions", drawn(710, 1_000_000, 50_000_000)),
            Case("a budget that a layer uses exactly", exact(720, 0)),
            Case("a budget one parameter short of a layer", exact(730, 1)),
            Case("one key/value head per query head",
                 lambda: {"budget": pick(735, 50_000, 5_000_000), "head_dim": 32, "group": 1,
                          "ff_mult": pick(736, 1, 4), "seq_len": pick(737, 2, 512)}),
            Case("one token", lambda: {"budget": pick(740, 10_000, 900_000), "head_dim": 16,
                                       "group": 4, "ff_mult": 4, "seq_len": 1}),
            Case("a budget too small for one group of heads",
                 lambda: {"budget": pick(750, 1, 400), "head_dim": 8, "group": 2, "ff_mult": 4,
                          "seq_len": pick(751, 1, 64)})]


def _design_slip(slip: str) -> Callable[..., dict[str, int] | None]:
    return lambda budget, head_dim, group, ff_mult, seq_len: _design(
        budget, head_dim, group, ff_mult, seq_len, slip)


_DESIGN_SLIPS = (
    Slip("keys and values are narrower than queries: one key head and one value head per "
         "group of query heads", _design_slip("full keys")),
    Slip("the gated FFN has three maps, two into d_ff features and one back",
         _design_slip("two ffn maps")),
    Slip("every linear map has a bias: count them", _design_slip("no biases")),
    Slip("the two LayerNorms have a gain and a shift each: count them", _design_slip("no norms")),
    Slip("a layer that uses the whole budget fits: params <= budget", _design_slip("strict")),
    Slip("count only the (query, key) pairs the causal mask keeps: query t sees t + 1 keys",
         _design_slip("full square")),
    Slip("a multiply-add is two FLOPs", _design_slip("one per multiply-add")),
    Slip("the scores q.k and the weighted sum of the values are matrix products too",
         _design_slip("no scores")),
)


# 9. no_causal_mask (an ablation to predict) --------------------------------------------------


_NO_CAUSAL_MASK = Question(
    id="transformer.no_causal_mask", choices="abcd",
    hint=("during teacher forcing the decoder's input at position t + 1 is the token "
          "position t must predict: what can an unmasked position read in training, and "
          "what does the model see when it generates one token at a time?"))


# 10. mask_tokens, graded by its properties over many draws ---------------------------------------

#: A verdict passes when the measured share is within this many standard errors of its expectation.
MLM_Z = 5.0


def _share(count: torch.Tensor, total: torch.Tensor, expected: float) -> bool:
    n = max(int(total), 1)
    return abs(int(count) / n - expected) <= MLM_Z * math.sqrt(expected * (1 - expected) / n)


def mask_tokens_verdicts(inputs: Mapping[str, Any], draws: dict[str, Any]) -> dict[str, bool]:
    """``Exercise.postprocess`` of ``mask_tokens``: verdicts by property on the stacked draws.

    ``draws`` is what :func:`course_lib.exercises._calls.mask_tokens_draws` returned, as plain
    arrays. The expectations count the random replacement's own hits: it draws ``mask_id`` or the
    original token with probability ``1 / vocab_size`` each.

    Example:
        >>> from course_lib.exercises._calls import mask_tokens_draws
        >>> tokens = torch.randint(4, 30, (2, 32), generator=gen(0))
        >>> special = torch.zeros(2, 32, dtype=torch.bool)
        >>> case = {"tokens": tokens, "special": special, "mask_id": 3, "vocab_size": 30,
        ...         "p": 0.15, "draws": 100, "seed": 0}
        >>> draws = {k: v.numpy() for k, v in mask_tokens_draws(lm.mask_tokens, case).items()}
        >>> all(mask_tokens_verdicts(case, draws).values())
        True
    """
    tokens, special, V = inputs["tokens"], inputs["special"], inputs["vocab_size"]
    X, Y = torch.as_tensor(draws["inputs"]), torch.as_tensor(draws["targets"])  # (draws, B, T)
    if X.shape[1:] != tokens.shape or Y.shape != X.shape:
        raise AssertionError(f"expected draws of shape {tuple(tokens.shape)}")
    again = torch.as_tensor(draws["again_inputs"]), torch.as_tensor(draws["again_targets"])
    tok, spec = tokens.expand_as(X), special.expand_as(X)
    labelled = Y != lm.IGNORE_INDEX
    ordinary, n_sel = ~spec, labelled.sum()
    masked, kept = labelled & (X == inputs["mask_id"]), labelled & (X == tok)
    return {
        "one seed gives one result": bool(torch.equal(again[0], X[0])
                                          and torch.equal(again[1], Y[0])),
        "labels hold the original tokens": bool(torch.equal(Y[labelled], tok[labelled])),
        "unlabelled positions keep their token": bool(torch.equal(X[~labelled], tok[~labelled])),
        "special and padding positions are never selected": not bool((labelled & spec).any()),
        "the selected share of ordinary positions is p": _share(
            (labelled & ordinary).sum(), ordinary.sum(), inputs["p"]),
        "80% of the selected positions become mask_id": _share(masked.sum(), n_sel, 0.8 + 0.1 / V),
        "10% keep their token": _share(kept.sum(), n_sel, 0.1 + 0.1 / V),
        "10% become another id, drawn from [0, vocab_size)": _share(
            (labelled & ~masked & ~kept).sum(), n_sel, 0.1 - 0.2 / V)
        and bool(((X >= 0) & (X < V)).all()),
    }


def _mask_tokens_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, lengths: list[int], p: float,
              draws: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            real = lengths_mask(lengths, T)
            tokens = torch.randint(4, V, (B, T), generator=gen(seed))  # ids 0-3 are special
            tokens = torch.where(real, tokens, torch.zeros_like(tokens))  # 0: padding
            tokens[:, 0] = 1  # [CLS]
            special = ~real
            special[:, 0] = True
            return {"tokens": tokens, "special": special, "mask_id": 3, "vocab_size": V,
                    "p": p, "draws": draws, "seed": seed + 1}
        return inputs

    return [Case("a padded batch of 4, p=0.15", build(800, 4, 24, 30, [24, 17, 9, 20], 0.15, 150)),
            Case("batch size 1, no padding, p=0.3", build(810, 1, 64, 50, [64], 0.3, 200)),
            Case("a vocabulary of 1000, p=0.15", build(820, 8, 16, 1000, [16, 3, 9, 16, 12, 5,
                                                                           16, 8], 0.15, 150)),
            Case("a vocabulary of 8, p=0.5", build(830, 2, 16, 8, [16, 11], 0.5, 150))]


def _corrupt(tokens: torch.Tensor, mask_id: int, vocab_size: int, generator: Any, p: float,
             special: torch.Tensor | None, slip: str) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption with one mistake named by ``slip`` (torch only)."""
    g = None if slip == "global rng" else generator
    u, r = torch.rand(tokens.shape, generator=g), torch.rand(tokens.shape, generator=g)
    rand_ids = torch.randint(vocab_size, tokens.shape, generator=g)
    selected = u < p
    if special is not None and slip != "special selected":
        selected &= ~special
    to_mask = selected if slip == "all masked" else selected & (r < 0.8)
    to_rand = selected & (r >= 0.8) & (r < 0.9) if slip not in ("no random", "all masked") \
        else torch.zeros_like(selected)
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_rand, rand_ids, inputs)
    labels = torch.ones_like(selected) if slip == "label everywhere" else selected
    return inputs, torch.where(labels, tokens, torch.full_like(tokens, lm.IGNORE_INDEX))


def _mask_tokens_slip(slip: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return lambda tokens, mask_id, vocab_size, generator, p=0.15, special=None: _corrupt(
        tokens, mask_id, vocab_size, generator, p, special, slip)


_MASK_TOKENS_SLIPS = (
    Slip("special and padding positions were selected: leave every position where special is "
         "True untouched and unlabelled", _mask_tokens_slip("special selected")),
    Slip("no selected position got a random token: 10% of them must become an id drawn from "
         "[0, vocab_size)", _mask_tokens_slip("no random")),
    Slip("every selected position became mask_id: only 80% should; 10% get a random id and 10% "
         "keep their token", _mask_tokens_slip("all masked")),
    Slip("labels belong at the selected positions only; every other target is -100",
         _mask_tokens_slip("label everywhere")),
    Slip("the same generator seed gave different results: pass generator=generator to every "
         "random draw", _mask_tokens_slip("global rng")),
)


# 11. next_token_loss --------------------------------------------------------------------------


def _nll(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                           reduction=reduction)


def _next_token_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, dtype: torch.dtype,
              lengths: list[int] | None) -> Inputs:
        return lambda: {"logits": randn(seed, B, T, V, dtype=dtype, scale=2.0),
                        "tokens": torch.randint(V, (B, T), generator=gen(seed + 1)),
                        "padding": None if lengths is None else lengths_mask(lengths, T)}

    return [Case("float32, no padding", build(900, 2, 5, 7, f32, None)),
            Case("float64, batch size 1", build(910, 1, 6, 4, f64, None)),
            Case("float32, padded batch", build(920, 3, 8, 10, f32, [8, 5, 2])),
            Case("float64, padded batch", build(930, 2, 4, 5, f64, [3, 4]))]


def _targets(tokens: torch.Tensor, padding: torch.Tensor | None, shift: slice) -> torch.Tensor:
    t = tokens[:, shift]
    return t if padding is None else t.masked_fill(~padding[:, shift], -100)


_NEXT_TOKEN_SLIPS = (
    Slip("the targets are not shifted: position t predicts tokens[:, t + 1]",
         lambda logits, tokens, padding=None: _nll(logits, _targets(tokens, padding,
                                                                    slice(None)))),
    Slip("padded targets must not count (use padding[:, 1:])",
         lambda logits, tokens, padding=None: _nll(logits[:, :-1], tokens[:, 1:])),
    Slip("take the mean over the real targets, not the sum",
         lambda logits, tokens, padding=None: _nll(
             logits[:, :-1], _targets(tokens, padding, slice(1, None)), "sum")),
    Slip("the shift goes the other way: logits[:, :-1] predict tokens[:, 1:]",
         lambda logits, tokens, padding=None: _nll(
             logits[:, 1:], _targets(tokens, padding, slice(None, -1)))),
)


# The registry ---------------------------------------------------------------------------------

_LAYERS = (transformer.FeedForward, transformer.EncoderLayer, transformer.DecoderLayer,
           transformer.Encoder, transformer.Decoder, transformer.sublayer,
           multihead.MultiHeadAttention, multihead.multi_head_attention,
           attention.scaled_dot_product_attention)

EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="transformer.feed_forward", reference=feed_forward, cases=_feed_forward_cases,
             slips=_FEED_FORWARD_SLIPS, forbidden=(transformer.FeedForward,)),
    Exercise(id="transformer.layer_norm", reference=layer_norm, cases=_layer_norm_cases,
             slips=_LAYER_NORM_SLIPS),
    Exercise(id="transformer.encoder_layer", reference=encoder_layer,
             cases=_encoder_layer_cases, slips=_ENCODER_LAYER_SLIPS, forbidden=_LAYERS),
    Exercise(id="transformer.decoder_masks", reference=decoder_masks,
             cases=_decoder_masks_cases, slips=_DECODER_MASKS_SLIPS,
             forbidden=(lm.gpt_attention_mask, lm.bert_attention_mask,
                        transformer.key_padding_mask, attention.causal_mask,
                        attention.attention_mask)),
    Exercise(id="transformer.given_reads", reference=given_reads,
             cases=_given_reads_cases, slips=_GIVEN_READS_SLIPS),
    Exercise(id="transformer.decoder_layer", reference=decoder_layer,
             cases=_decoder_layer_cases, slips=_DECODER_LAYER_SLIPS, forbidden=_LAYERS),
    _FFN_SHARE,
    Exercise(id="transformer.design_layer", reference=design_layer, cases=_design_cases,
             slips=_DESIGN_SLIPS,
             forbidden=(counting.attention_params, counting.feed_forward_params,
                        counting.encoder_layer_params, counting.decoder_layer_params)),
    _NO_CAUSAL_MASK,
    Exercise(id="transformer.mask_tokens", reference=lm.mask_tokens, cases=_mask_tokens_cases,
             call=mask_tokens_draws, postprocess=mask_tokens_verdicts,
             slips=_MASK_TOKENS_SLIPS),
    Exercise(id="transformer.next_token_loss", reference=lm.next_token_loss,
             cases=_next_token_cases, slips=_NEXT_TOKEN_SLIPS, forbidden=(lm.masked_lm_loss,)),
]}
