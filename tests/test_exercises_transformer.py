"""Chapter 3's graded exercises: torch-only solutions pass, slips fail with a helpful message,
and solutions that call course_lib's implementations fail with the reference-call message."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from course_lib import grading
from course_lib import transformer as tf
from course_lib.exercises import transformer as ex3

pytestmark = pytest.mark.ch03


# --------------------------------------------------------------------------------------------
# Solutions a student could write: torch only (the same code as the solution notebook's cells)
# --------------------------------------------------------------------------------------------


def feed_forward(x, w1, b1, w2, b2):
    return torch.relu(x @ w1.T + b1) @ w2.T + b2


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def residual_sublayer(x, sublayer, gamma, beta, norm_first, eps=1e-5):
    def norm(z):
        return F.layer_norm(z, (z.shape[-1],), gamma, beta, eps)
    if norm_first:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))


def encoder_layer(x, params, n_heads, mask, norm_first):
    p = params
    B, T, d = x.shape
    dh = d // n_heads

    def heads(z):
        return z.view(B, T, n_heads, dh).transpose(1, 2)  # (B, h, T, dh)

    def attention(z):
        q = heads(z @ p["w_q"].T + p["b_q"])
        k = heads(z @ p["w_k"].T + p["b_k"])
        v = heads(z @ p["w_v"].T + p["b_v"])
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, h, T, T)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None], float("-inf"))
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        return out @ p["w_o"].T + p["b_o"]

    def ffn(z):
        return torch.relu(z @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]

    def norm(z, i):
        return F.layer_norm(z, (d,), p[f"gamma_{i}"], p[f"beta_{i}"], 1e-5)

    if norm_first:
        x = x + attention(norm(x, 1))
        return x + ffn(norm(x, 2))
    x = norm(x + attention(x), 1)
    return norm(x + ffn(x), 2)


def decoder_masks(src_padding, tgt_padding):
    B, T = tgt_padding.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=tgt_padding.device).tril()
    self_mask = causal[None, :, :] & tgt_padding[:, None, :]  # (B, T, T)
    cross_mask = src_padding[:, None, :].expand(B, T, src_padding.shape[1])  # (B, T, S)
    return self_mask, cross_mask


def parameter_count(d_model, d_ff, n_encoder_layers, n_decoder_layers, src_vocab_size,
                    tgt_vocab_size):
    d = d_model
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * d_ff + d_ff + d
    encoder = attention + ffn + 2 * (2 * d)
    decoder = 2 * attention + ffn + 3 * (2 * d)
    embeddings = (src_vocab_size + tgt_vocab_size) * d
    output = d * tgt_vocab_size + tgt_vocab_size
    return embeddings + n_encoder_layers * encoder + n_decoder_layers * decoder + output


def mask_tokens(tokens, mask_id, vocab_size, generator, p=0.15):
    u = torch.rand(tokens.shape, generator=generator)
    r = torch.rand(tokens.shape, generator=generator)
    rand_ids = torch.randint(vocab_size, tokens.shape, generator=generator)
    selected = u < p
    inputs = tokens.clone()
    inputs[selected & (r < 0.8)] = mask_id
    replace = selected & (r >= 0.8) & (r < 0.9)
    inputs[replace] = rand_ids[replace]
    targets = torch.where(selected, tokens, torch.full_like(tokens, -100))
    return inputs, targets


def next_token_loss(logits, tokens, padding=None):
    targets = tokens[:, 1:].clone()
    if padding is not None:
        targets[~padding[:, 1:]] = -100
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), targets.reshape(-1), ignore_index=-100)


SOLUTIONS: dict[str, Callable[..., Any]] = {
    "feed_forward": feed_forward, "layer_norm": layer_norm,
    "residual_sublayer": residual_sublayer, "encoder_layer": encoder_layer,
    "decoder_masks": decoder_masks, "parameter_count": parameter_count,
    "mask_tokens": mask_tokens, "next_token_loss": next_token_loss,
}


def _failures(name: str, fn: Callable[..., Any]) -> str | None:
    return grading.format_failures(f"transformer.{name}", grading.evaluate(f"transformer.{name}", fn))


def test_registry_matches_the_solutions() -> None:
    assert sorted(ex3.EXERCISES) == sorted(f"transformer.{n}" for n in SOLUTIONS)
    assert len(ex3.EXERCISES) >= 6
    assert sum(e.points for e in ex3.EXERCISES.values()) == 19


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_torch_only_solution_passes(name: str) -> None:
    assert _failures(name, SOLUTIONS[name]) is None
    grading.check(f"transformer.{name}", SOLUTIONS[name])  # the hidden-test cell's call


# --------------------------------------------------------------------------------------------
# Slips: each fails, with a message that names the slip
# --------------------------------------------------------------------------------------------


def _ln_unbiased(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta


def _encoder_torch_mask(x, params, n_heads, mask, norm_first):
    return encoder_layer(x, params, n_heads, None if mask is None else ~mask, norm_first)


def _masks_not_causal(src_padding, tgt_padding):
    T = tgt_padding.shape[1]
    return tgt_padding[:, None, :].expand(-1, T, -1), decoder_masks(src_padding, tgt_padding)[1]


def _count_without_norms(d_model, d_ff, n_encoder_layers, n_decoder_layers, src_vocab_size,
                         tgt_vocab_size):
    return (parameter_count(d_model, d_ff, n_encoder_layers, n_decoder_layers, src_vocab_size,
                            tgt_vocab_size)
            - 4 * d_model * n_encoder_layers - 6 * d_model * n_decoder_layers)


def _mask_tokens_wrong_order(tokens, mask_id, vocab_size, generator, p=0.15):
    u = torch.rand(tokens.shape, generator=generator)
    rand_ids = torch.randint(vocab_size, tokens.shape, generator=generator)  # drawn before r
    r = torch.rand(tokens.shape, generator=generator)
    selected = u < p
    inputs = torch.where(selected & (r < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(selected & (r >= 0.8) & (r < 0.9), rand_ids, inputs)
    return inputs, torch.where(selected, tokens, torch.full_like(tokens, -100))


def _loss_unshifted(logits, tokens, padding=None):
    targets = tokens.clone()
    if padding is not None:
        targets[~padding] = -100
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


SLIPS = [
    ("feed_forward", lambda x, w1, b1, w2, b2: (x @ w1.T + b1) @ w2.T + b2, "ReLU"),
    ("layer_norm", _ln_unbiased, "unbiased variance"),
    ("residual_sublayer",
     lambda x, sublayer, gamma, beta, norm_first, eps=1e-5:
         residual_sublayer(x, sublayer, gamma, beta, not norm_first, eps), "swapped"),
    ("encoder_layer", _encoder_torch_mask, "mask looks inverted"),
    ("encoder_layer",
     lambda x, params, n_heads, mask, norm_first: encoder_layer(x, params, 1, mask, norm_first),
     "heads are not split"),
    ("decoder_masks", _masks_not_causal, "must be causal"),
    ("decoder_masks", lambda src_padding, tgt_padding:
         tuple(~m for m in decoder_masks(src_padding, tgt_padding)), "inverted"),
    ("parameter_count", _count_without_norms, "LayerNorm parameters are missing"),
    ("mask_tokens", _mask_tokens_wrong_order, "replacements differ"),
    ("next_token_loss", _loss_unshifted, "not shifted"),
]


@pytest.mark.parametrize("name, slip, hint", SLIPS, ids=[f"{n}-{h}" for n, _, h in SLIPS])
def test_a_slip_fails_with_a_helpful_message(name: str, slip: Callable[..., Any],
                                              hint: str) -> None:
    message = _failures(name, slip)
    assert message is not None and hint in message, message
    with pytest.raises(AssertionError, match="hidden test cases failed"):
        grading.check(f"transformer.{name}", slip)


def test_wrong_shape_and_type_are_explained() -> None:
    message = _failures("feed_forward", lambda x, w1, b1, w2, b2: feed_forward(x, w1, b1, w2, b2)[..., :1])
    assert "expected shape" in message
    message = _failures("parameter_count", lambda **kw: float(parameter_count(**kw)))
    assert "expected" in message
    message = _failures("layer_norm", lambda x, gamma, beta, eps=1e-5: layer_norm(x, gamma, beta, eps).double())
    assert "expected dtype float32" in message


def test_a_crash_is_reported_per_case() -> None:
    def crash(**kwargs):
        raise RuntimeError("boom")
    message = _failures("next_token_loss", crash)
    assert "your function raised RuntimeError: boom" in message


# --------------------------------------------------------------------------------------------
# The reference guard: calling course_lib's implementation of any chapter-3 exercise fails
# --------------------------------------------------------------------------------------------


def _ff_module(x, w1, b1, w2, b2):
    ff = tf.FeedForward(w1.shape[1], w1.shape[0]).to(x.dtype)
    with torch.no_grad():
        ff.linear1.weight.copy_(w1)
        ff.linear1.bias.copy_(b1)
        ff.linear2.weight.copy_(w2)
        ff.linear2.bias.copy_(b2)
    return ff(x)


def _masks_by_library(src_padding, tgt_padding):
    T = tgt_padding.shape[1]
    return (tf.gpt_attention_mask(tgt_padding)[:, 0],
            tf.key_padding_mask(src_padding)[:, 0].expand(-1, T, -1))


def _count_by_library(d_model, d_ff, n_encoder_layers, n_decoder_layers, src_vocab_size,
                      tgt_vocab_size):
    config = tf.TransformerConfig(src_vocab_size, tgt_vocab_size, d_model, 1, n_encoder_layers,
                                  n_decoder_layers, d_ff)
    return tf.transformer_params(config)["total"]


def _ln_through_another_exercise(x, gamma, beta, eps=1e-5):
    # residual_sublayer of course_lib with a zero sublayer is a LayerNorm in post-norm mode
    return ex3.residual_sublayer(x, torch.zeros_like, gamma, beta, False, eps)


REFERENCE_CALLERS = [
    ("feed_forward", _ff_module, "transformer.feed_forward"),
    ("layer_norm", _ln_through_another_exercise, "transformer.residual_sublayer"),
    ("encoder_layer", ex3.encoder_layer, "transformer.encoder_layer"),
    ("decoder_masks", _masks_by_library, "transformer.decoder_masks"),
    ("parameter_count", _count_by_library, "transformer.parameter_count"),
    ("mask_tokens", tf.mask_tokens, "transformer.mask_tokens"),
    ("next_token_loss", lambda logits, tokens, padding=None: tf.next_token_loss(logits, tokens, padding),
     "transformer.next_token_loss"),
]


@pytest.mark.parametrize("name, fn, hit", REFERENCE_CALLERS, ids=[n for n, _, _ in REFERENCE_CALLERS])
def test_calling_the_reference_fails_with_the_reference_message(name: str, fn: Callable[..., Any],
                                                                hit: str) -> None:
    results = grading.evaluate(f"transformer.{name}", fn)
    assert all(r.reference_called == hit for r in results)
    with pytest.raises(grading.ReferenceCallError, match=f"calls course_lib's implementation of '{hit}'"):
        grading.check(f"transformer.{name}", fn)


def test_using_chapter2_multihead_attention_in_the_encoder_layer_is_flagged() -> None:
    from course_lib.multihead import MultiHeadAttention

    def with_mha(x, params, n_heads, mask, norm_first):
        mha = MultiHeadAttention(x.shape[-1], n_heads).to(x.dtype)
        out, _ = mha(x, x, x, None if mask is None else mask[:, None])
        return out

    results = grading.evaluate("transformer.encoder_layer", with_mha)
    assert all(r.reference_called == "transformer.encoder_layer" for r in results)


# --------------------------------------------------------------------------------------------
# The cases themselves
# --------------------------------------------------------------------------------------------


def test_mask_tokens_cases_select_and_replace_something() -> None:
    """The hidden cases exercise every branch (masked, random, kept, unselected)."""
    kinds = set()
    for case in ex3.EXERCISES["transformer.mask_tokens"].cases():
        inputs = case.inputs()
        x, y = tf.mask_tokens(**inputs)
        selected = y != tf.IGNORE_INDEX
        kinds |= {"unselected"} if (~selected).any() else set()
        kinds |= {"masked"} if ((x == inputs["mask_id"]) & selected).any() else set()
        kinds |= {"random"} if ((x != inputs["mask_id"]) & (x != inputs["tokens"]) & selected).any() else set()
        kinds |= {"kept"} if ((x == inputs["tokens"]) & selected).any() else set()
    assert kinds == {"unselected", "masked", "random", "kept"}


def test_encoder_layer_cases_have_no_fully_masked_query() -> None:
    for case in ex3.EXERCISES["transformer.encoder_layer"].cases():
        mask = case.inputs()["mask"]
        assert mask is None or bool(mask.any(-1).all()), case.name


def test_parameter_count_reference_matches_a_built_model() -> None:
    inputs = ex3.EXERCISES["transformer.parameter_count"].cases()[1].inputs()
    config = tf.TransformerConfig(src_vocab_size=inputs["src_vocab_size"],
                                  tgt_vocab_size=inputs["tgt_vocab_size"],
                                  d_model=inputs["d_model"], d_ff=inputs["d_ff"],
                                  n_encoder_layers=inputs["n_encoder_layers"],
                                  n_decoder_layers=inputs["n_decoder_layers"])
    assert ex3.parameter_count(**inputs) == tf.count_parameters(tf.Transformer(config))
