"""Graded exercises of chapter 3, "The Transformer": references, hidden cases, points.

Every exercise is solvable with torch alone. The reference-call guard fails a solution that calls
course_lib's implementation of any exercise of this chapter: the references below, the modules
they wrap (:class:`~course_lib.transformer.FeedForward`, :class:`~course_lib.transformer.EncoderLayer`,
:class:`~course_lib.multihead.MultiHeadAttention`, ...) and the mask, loss and parameter-count
helpers of :mod:`course_lib.transformer`.

Hidden cases are built from seeded ``torch.Generator`` s on the CPU; they cover several shapes,
batch size 1, float32 and float64, and masks or padding where they apply. A mismatch is explained,
where a common slip explains it, by recomputing the slip (``_slips``) and naming it; slips may call
the references, since ``diagnose`` runs outside the guard.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from course_lib import grading
from course_lib import transformer as tf
from course_lib.grading import Case, Exercise
from course_lib.multihead import MultiHeadAttention

Inputs = Callable[[], dict[str, Any]]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    # Drawn in float64 and cast, so the float32 and float64 cases share one stream of values.
    return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)


def _slips(*slips: tuple[str, Callable[..., Any]]
           ) -> Callable[[Mapping[str, Any], Any, Any], str | None]:
    """A ``diagnose``: the message of the first slip whose output matches the student's."""

    def diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
        for message, slip in slips:
            try:
                alt = grading.to_plain(slip(**inputs))
            except Exception:  # the slip does not apply to these inputs
                continue
            if grading.compare_plain(got, alt) is None:
                return message
        return None

    return diagnose


# --------------------------------------------------------------------------------------------
# 1. feed_forward
# --------------------------------------------------------------------------------------------


def feed_forward(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                 b2: torch.Tensor) -> torch.Tensor:
    """Reference: ``relu(x W1^T + b1) W2^T + b2`` through :class:`~course_lib.transformer.FeedForward`."""
    d_ff, d = w1.shape
    ff = tf.FeedForward(d, d_ff).to(x.dtype)
    with torch.no_grad():
        ff.linear1.weight.copy_(w1)
        ff.linear1.bias.copy_(b1)
        ff.linear2.weight.copy_(w2)
        ff.linear2.bias.copy_(b2)
        return ff(x)


def _feed_forward_cases() -> list[Case]:
    def build(seed: int, lead: tuple[int, ...], d: int, d_ff: int, dtype: torch.dtype) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = _gen(seed)
            return {"x": _randn(g, *lead, d, dtype=dtype),
                    "w1": _randn(g, d_ff, d, dtype=dtype, scale=d ** -0.5),
                    "b1": _randn(g, d_ff, dtype=dtype, scale=0.1),
                    "w2": _randn(g, d, d_ff, dtype=dtype, scale=d_ff ** -0.5),
                    "b2": _randn(g, d, dtype=dtype, scale=0.1)}
        return inputs

    return [
        Case("float32, (batch, length, d)", build(101, (2, 5), 8, 32, torch.float32)),
        Case("float64, batch size 1", build(102, (1, 3), 4, 6, torch.float64)),
        Case("float32, a 2-D input (length, d)", build(103, (7,), 6, 24, torch.float32)),
        Case("float64, 4-D input", build(104, (2, 3, 2), 5, 7, torch.float64)),
    ]


# --------------------------------------------------------------------------------------------
# 2. layer_norm
# --------------------------------------------------------------------------------------------


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Reference: LayerNorm over the last dimension (biased variance, eps inside the root)."""
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def _layer_norm_unbiased(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                         eps: float = 1e-5) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * gamma + beta


def _layer_norm_eps_outside(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                            eps: float = 1e-5) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * gamma + beta


def _layer_norm_no_affine(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                          eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), None, None, eps)


def _layer_norm_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, eps: float | None,
              scale: float = 1.0, shift: float = 0.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = _gen(seed)
            d = shape[-1]
            out = {"x": _randn(g, *shape, dtype=dtype, scale=scale) + shift,
                   "gamma": 1.0 + _randn(g, d, dtype=dtype, scale=0.3),
                   "beta": _randn(g, d, dtype=dtype, scale=0.3)}
            if eps is not None:
                out["eps"] = eps
            return out
        return inputs

    return [
        Case("float32, (batch, length, d), default eps", build(201, (2, 5, 8), torch.float32, None)),
        Case("float64, batch size 1, eps=0.1", build(202, (1, 4, 6), torch.float64, 0.1)),
        Case("float32, large offset and scale", build(203, (3, 16), torch.float32, 1e-5, 10.0, 50.0)),
        Case("float64, 4-D input, small rows", build(204, (2, 3, 2, 4), torch.float64, 1e-3, 0.05)),
    ]


# --------------------------------------------------------------------------------------------
# 3. residual_sublayer
# --------------------------------------------------------------------------------------------


def residual_sublayer(x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor],
                      gamma: torch.Tensor, beta: torch.Tensor, norm_first: bool,
                      eps: float = 1e-5) -> torch.Tensor:
    """Reference: ``x + f(LN(x))`` (pre-norm) or ``LN(x + f(x))`` (post-norm)."""
    def ln(z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), gamma, beta, eps)
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))


def _residual_swapped(x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor],
                      gamma: torch.Tensor, beta: torch.Tensor, norm_first: bool,
                      eps: float = 1e-5) -> torch.Tensor:
    return residual_sublayer(x, sublayer, gamma, beta, not norm_first, eps)


def _residual_missing(x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor],
                      gamma: torch.Tensor, beta: torch.Tensor, norm_first: bool,
                      eps: float = 1e-5) -> torch.Tensor:
    def ln(z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), gamma, beta, eps)
    return sublayer(ln(x)) if norm_first else ln(sublayer(x))


def _residual_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, norm_first: bool) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = _gen(seed)
            d = shape[-1]
            x = _randn(g, *shape, dtype=dtype, scale=2.0)
            w = _randn(g, d, d, dtype=dtype, scale=d ** -0.5)

            def sublayer(z: torch.Tensor) -> torch.Tensor:  # a fixed toy sublayer
                return torch.tanh(z @ w)

            return {"x": x, "sublayer": sublayer,
                    "gamma": 1.0 + _randn(g, d, dtype=dtype, scale=0.3),
                    "beta": _randn(g, d, dtype=dtype, scale=0.3), "norm_first": norm_first}
        return inputs

    return [
        Case("float32, pre-norm", build(301, (2, 5, 8), torch.float32, True)),
        Case("float32, post-norm", build(302, (2, 5, 8), torch.float32, False)),
        Case("float64, batch size 1, pre-norm", build(303, (1, 3, 6), torch.float64, True)),
        Case("float64, batch size 1, post-norm", build(304, (1, 4, 4), torch.float64, False)),
    ]


# --------------------------------------------------------------------------------------------
# 4. encoder_layer
# --------------------------------------------------------------------------------------------

ENCODER_PARAM_NAMES = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o",
                       "w_1", "b_1", "w_2", "b_2", "gamma_1", "beta_1", "gamma_2", "beta_2")


def encoder_layer(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
                  mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
    """Reference: :class:`~course_lib.transformer.EncoderLayer` (dropout 0) with ``params``."""
    d = x.shape[-1]
    d_ff = params["w_1"].shape[0]
    layer = tf.EncoderLayer(d, n_heads, d_ff, dropout=0.0, norm_first=norm_first,
                            attn_impl="reference").to(x.dtype).eval()
    attn = layer.self_attn
    pairs = [(attn.q_proj, "q"), (attn.k_proj, "k"), (attn.v_proj, "v"), (attn.out_proj, "o"),
             (layer.ff.linear1, "1"), (layer.ff.linear2, "2")]
    with torch.no_grad():
        for lin, key in pairs:
            lin.weight.copy_(params[f"w_{key}"])
            lin.bias.copy_(params[f"b_{key}"])
        for norm, key in ((layer.norm1, "1"), (layer.norm2, "2")):
            norm.weight.copy_(params[f"gamma_{key}"])
            norm.bias.copy_(params[f"beta_{key}"])
        out, _ = layer(x, None if mask is None else mask[:, None])  # (B, T, T) -> (B, 1, T, T)
    return out


def _encoder_layer_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, d: int, h: int, d_ff: int, dtype: torch.dtype,
              masked: bool, norm_first: bool) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = _gen(seed)
            shapes = {"w_q": (d, d), "w_k": (d, d), "w_v": (d, d), "w_o": (d, d),
                      "w_1": (d_ff, d), "w_2": (d, d_ff)}
            params: dict[str, torch.Tensor] = {}
            for name in ENCODER_PARAM_NAMES:
                if name.startswith("w_"):
                    params[name] = _randn(g, *shapes[name], dtype=dtype,
                                          scale=shapes[name][1] ** -0.5)
                elif name.startswith("gamma"):
                    params[name] = 1.0 + _randn(g, d, dtype=dtype, scale=0.2)
                else:
                    width = d_ff if name == "b_1" else d
                    params[name] = _randn(g, width, dtype=dtype, scale=0.1)
            x = _randn(g, B, T, d, dtype=dtype)
            mask = None
            if masked:  # random pattern; every query keeps itself so no row is fully masked
                mask = (torch.rand(B, T, T, generator=g) > 0.4) | torch.eye(T, dtype=torch.bool)
            return {"x": x, "params": params, "n_heads": h, "mask": mask,
                    "norm_first": norm_first}
        return inputs

    return [
        Case("float32, post-norm, no mask", build(401, 2, 5, 8, 2, 16, torch.float32, False, False)),
        Case("float32, pre-norm, masked", build(402, 2, 6, 8, 4, 12, torch.float32, True, True)),
        Case("float64, batch size 1, post-norm, masked",
             build(403, 1, 4, 6, 3, 10, torch.float64, True, False)),
        Case("float64, pre-norm, one head", build(404, 3, 3, 4, 1, 8, torch.float64, False, True)),
    ]


def _encoder_layer_torch_mask(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
                              mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
    if mask is None:
        raise ValueError("no mask")
    return encoder_layer(x, params, n_heads, ~mask, norm_first)


def _encoder_layer_swapped_norm(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
                                mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
    return encoder_layer(x, params, n_heads, mask, not norm_first)


def _encoder_layer_one_head(x: torch.Tensor, params: dict[str, torch.Tensor], n_heads: int,
                            mask: torch.Tensor | None, norm_first: bool) -> torch.Tensor:
    if n_heads == 1:
        raise ValueError("already one head")
    return encoder_layer(x, params, 1, mask, norm_first)


# --------------------------------------------------------------------------------------------
# 5. decoder_masks
# --------------------------------------------------------------------------------------------


def decoder_masks(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: the decoder's self-attention ``(B, T, T)`` and cross-attention ``(B, T, S)`` masks."""
    T = tgt_padding.shape[1]
    self_mask = tf.gpt_attention_mask(tgt_padding)[:, 0]  # (B, T, T)
    cross_mask = tf.key_padding_mask(src_padding)[:, 0].expand(-1, T, -1)  # (B, T, S)
    return self_mask, cross_mask


def _padding_from_lengths(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]


def _decoder_masks_cases() -> list[Case]:
    def build(src_lengths: list[int], S: int, tgt_lengths: list[int], T: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"src_padding": _padding_from_lengths(src_lengths, S),
                    "tgt_padding": _padding_from_lengths(tgt_lengths, T)}
        return inputs

    return [
        Case("no padding", build([4, 4], 4, [3, 3], 3)),
        Case("padded sources and targets", build([5, 2, 3], 5, [4, 1, 2], 4)),
        Case("batch size 1, source shorter than target", build([2], 2, [6], 6)),
        Case("batch size 1, padded target", build([3], 4, [2], 5)),
    ]


def _decoder_masks_inverted(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = decoder_masks(src_padding, tgt_padding)
    return ~a, ~b


def _decoder_masks_not_causal(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    _, b = decoder_masks(src_padding, tgt_padding)
    T = tgt_padding.shape[1]
    return tgt_padding[:, None, :].expand(-1, T, -1), b


def _decoder_masks_upper(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = decoder_masks(src_padding, tgt_padding)
    T = tgt_padding.shape[1]
    upper = torch.ones(T, T, dtype=torch.bool).triu()
    return tgt_padding[:, None, :] & upper, b


def _decoder_masks_no_tgt_padding(src_padding: torch.Tensor, tgt_padding: torch.Tensor
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    _, b = decoder_masks(src_padding, tgt_padding)
    B, T = tgt_padding.shape
    return torch.ones(T, T, dtype=torch.bool).tril().expand(B, T, T), b


# --------------------------------------------------------------------------------------------
# 6. parameter_count
# --------------------------------------------------------------------------------------------


def parameter_count(d_model: int, d_ff: int, n_encoder_layers: int, n_decoder_layers: int,
                    src_vocab_size: int, tgt_vocab_size: int) -> int:
    """Reference: parameters of the post-norm, untied encoder-decoder Transformer, by formula."""
    config = tf.TransformerConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                                  d_model=d_model, n_heads=1, n_encoder_layers=n_encoder_layers,
                                  n_decoder_layers=n_decoder_layers, d_ff=d_ff)
    return int(tf.transformer_params(config)["total"])


def _parameter_count_cases() -> list[Case]:
    def build(*args: int) -> Inputs:
        names = ("d_model", "d_ff", "n_encoder_layers", "n_decoder_layers", "src_vocab_size",
                 "tgt_vocab_size")
        return lambda: dict(zip(names, args))

    return [
        Case("a tiny model", build(8, 16, 1, 1, 10, 12)),
        Case("the chapter's date model", build(64, 256, 2, 2, 60, 15)),
        Case("more decoder than encoder layers", build(32, 64, 1, 3, 7, 9)),
        Case("the base model's sizes (untied)", build(512, 2048, 6, 6, 37000, 37000)),
    ]


def _count_slip(drop: str) -> Callable[..., int]:
    def count(d_model: int, d_ff: int, n_encoder_layers: int, n_decoder_layers: int,
              src_vocab_size: int, tgt_vocab_size: int) -> int:
        d, L_e, L_d = d_model, n_encoder_layers, n_decoder_layers
        total = parameter_count(d, d_ff, L_e, L_d, src_vocab_size, tgt_vocab_size)
        if drop == "norms":
            return total - 4 * d * L_e - 6 * d * L_d
        if drop == "biases":
            return total - (4 * d + d_ff + d) * L_e - (8 * d + d_ff + d) * L_d - tgt_vocab_size
        if drop == "cross":
            return total - (4 * d * d + 4 * d + 2 * d) * L_d
        if drop == "output":
            return total - d * tgt_vocab_size - tgt_vocab_size
        if drop == "positions":  # a learned (max_len=?) table cannot be guessed; sinusoidal: 0
            return total - tgt_vocab_size * d
        raise ValueError(drop)
    return count


# --------------------------------------------------------------------------------------------
# 7. mask_tokens and 8. next_token_loss (references: course_lib.transformer's functions)
# --------------------------------------------------------------------------------------------


def _mask_tokens_cases() -> list[Case]:
    def build(seed: int, tokens_seed: int, B: int, T: int, vocab: int, p: float) -> Inputs:
        def inputs() -> dict[str, Any]:
            tokens = torch.randint(4, vocab, (B, T), generator=_gen(tokens_seed))
            return {"tokens": tokens, "mask_id": 3, "vocab_size": vocab,
                    "generator": _gen(seed), "p": p}
        return inputs

    return [
        Case("a batch of 4, p=0.15", build(701, 7001, 4, 20, 30, 0.15)),
        Case("batch size 1, p=0.5", build(702, 7002, 1, 30, 12, 0.5)),
        Case("a larger batch, p=0.3", build(703, 7003, 8, 16, 50, 0.3)),
    ]


def _mask_tokens_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 2 and all(hasattr(t, "shape") for t in got)):
        return "return a pair (inputs, targets) of integer tensors shaped like tokens"
    if got[1].shape == expected[1].shape and not ((got[1] == -100) == (expected[1] == -100)).all():
        return ("the positions you selected differ from the reference: draw "
                "u = torch.rand(tokens.shape, generator=generator) first and select u < p")
    if got[1].shape == expected[1].shape and not (got[1] == expected[1]).all():
        return "targets must hold the original token at selected positions and -100 elsewhere"
    return ("the selected positions are right but the replacements differ: draw r = torch.rand "
            "and then rand_ids = torch.randint(vocab_size, ...), in that order, and replace with "
            "mask_id when r < 0.8 and with rand_ids when 0.8 <= r < 0.9")


def _next_token_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, dtype: torch.dtype,
              lengths: list[int] | None) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = _gen(seed)
            logits = _randn(g, B, T, V, dtype=dtype, scale=2.0)
            tokens = torch.randint(V, (B, T), generator=g)
            padding = None if lengths is None else _padding_from_lengths(lengths, T)
            return {"logits": logits, "tokens": tokens, "padding": padding}
        return inputs

    return [
        Case("float32, no padding", build(801, 2, 5, 7, torch.float32, None)),
        Case("float64, batch size 1", build(802, 1, 6, 4, torch.float64, None)),
        Case("float32, padded batch", build(803, 3, 8, 10, torch.float32, [8, 5, 2])),
        Case("float64, padded batch", build(804, 2, 4, 5, torch.float64, [3, 4])),
    ]


def _next_token_unshifted(logits: torch.Tensor, tokens: torch.Tensor,
                          padding: torch.Tensor | None = None) -> torch.Tensor:
    targets = tokens if padding is None else tokens.masked_fill(~padding, -100)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


def _next_token_padding_ignored(logits: torch.Tensor, tokens: torch.Tensor,
                                padding: torch.Tensor | None = None) -> torch.Tensor:
    if padding is None:
        raise ValueError("no padding")
    return tf.next_token_loss(logits, tokens, None)


def _next_token_summed(logits: torch.Tensor, tokens: torch.Tensor,
                       padding: torch.Tensor | None = None) -> torch.Tensor:
    targets = tokens[:, 1:]
    if padding is not None:
        targets = targets.masked_fill(~padding[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100,
                           reduction="sum")


def _next_token_wrong_side(logits: torch.Tensor, tokens: torch.Tensor,
                           padding: torch.Tensor | None = None) -> torch.Tensor:
    targets = tokens[:, :-1]
    if padding is not None:
        targets = targets.masked_fill(~padding[:, :-1], -100)
    return F.cross_entropy(logits[:, 1:].flatten(0, 1), targets.flatten(), ignore_index=-100)


EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="transformer.feed_forward", reference=feed_forward,
             cases=_feed_forward_cases, forbidden=(tf.FeedForward,),
             diagnose=_slips(
                 ("the ReLU between the two linear maps is missing",
                  lambda x, w1, b1, w2, b2: (x @ w1.T + b1) @ w2.T + b2),
                 ("a bias is missing (b1 inside the ReLU, b2 after the second map)",
                  lambda x, w1, b1, w2, b2: F.relu(x @ w1.T) @ w2.T + b2),
                 ("a bias is missing (b1 inside the ReLU, b2 after the second map)",
                  lambda x, w1, b1, w2, b2: F.relu(x @ w1.T + b1) @ w2.T))),
    Exercise(id="transformer.layer_norm", reference=layer_norm,
             cases=_layer_norm_cases,
             diagnose=_slips(
                 ("you used the unbiased variance (divide by d, not d - 1: unbiased=False)",
                  _layer_norm_unbiased),
                 ("eps belongs inside the square root: (x - mean) / sqrt(var + eps)",
                  _layer_norm_eps_outside),
                 ("the normalised values must be scaled by gamma and shifted by beta",
                  _layer_norm_no_affine))),
    Exercise(id="transformer.residual_sublayer", reference=residual_sublayer,
             cases=_residual_cases,
             diagnose=_slips(
                 ("pre-norm and post-norm are swapped: norm_first=True means x + f(LN(x))",
                  _residual_swapped),
                 ("the residual connection (adding x back) is missing", _residual_missing))),
    Exercise(id="transformer.encoder_layer", reference=encoder_layer,
             cases=_encoder_layer_cases,
             forbidden=(tf.EncoderLayer, tf.DecoderLayer, tf.Encoder, tf.Decoder,
                        MultiHeadAttention),
             diagnose=_slips(
                 ("the mask looks inverted: True means 'may attend' (fill scores with -inf where "
                  "the mask is False)", _encoder_layer_torch_mask),
                 ("pre-norm and post-norm are swapped", _encoder_layer_swapped_norm),
                 ("the heads are not split: reshape (B, T, d) -> (B, h, T, d/h) and scale by "
                  "1/sqrt(d/h)", _encoder_layer_one_head))),
    Exercise(id="transformer.decoder_masks", reference=decoder_masks,
             cases=_decoder_masks_cases,
             forbidden=(tf.gpt_attention_mask, tf.bert_attention_mask, tf.key_padding_mask),
             diagnose=_slips(
                 ("the masks are inverted: in course_lib True means 'may attend' (torch.nn's "
                  "convention is the opposite)", _decoder_masks_inverted),
                 ("the self-attention mask must be causal: query i may attend to keys j <= i",
                  _decoder_masks_not_causal),
                 ("the causal mask is transposed: query i may attend to keys j <= i (lower "
                  "triangle)", _decoder_masks_upper),
                 ("the self-attention mask must also hide padded target keys",
                  _decoder_masks_no_tgt_padding))),
    Exercise(id="transformer.parameter_count", reference=parameter_count,
             cases=_parameter_count_cases,
             forbidden=(tf.transformer_params, tf.encoder_layer_params, tf.decoder_layer_params,
                        tf.attention_params, tf.feed_forward_params, tf.count_parameters),
             diagnose=_slips(
                 ("LayerNorm parameters are missing (2 d per LayerNorm: 2 per encoder layer, 3 "
                  "per decoder layer)", _count_slip("norms")),
                 ("biases are missing (every linear map has one)", _count_slip("biases")),
                 ("the decoder's cross-attention block (4 d^2 + 4 d and a LayerNorm) is missing",
                  _count_slip("cross")),
                 ("the output projection (d V_tgt weights and V_tgt biases) is missing",
                  _count_slip("output")),
                 ("count one embedding table per vocabulary (source and target are separate "
                  "here)", _count_slip("positions")))),
    Exercise(id="transformer.mask_tokens", reference=tf.mask_tokens,
             cases=_mask_tokens_cases, diagnose=_mask_tokens_diagnose),
    Exercise(id="transformer.next_token_loss", reference=tf.next_token_loss,
             cases=_next_token_cases, forbidden=(tf.masked_lm_loss,),
             diagnose=_slips(
                 ("the targets are not shifted: position t predicts tokens[:, t + 1]",
                  _next_token_unshifted),
                 ("padded targets must not count (use padding[:, 1:])",
                  _next_token_padding_ignored),
                 ("take the mean over the real targets, not the sum", _next_token_summed),
                 ("the shift goes the other way: logits[:, :-1] predict tokens[:, 1:]",
                  _next_token_wrong_side))),
]}
