"""Tests of course_lib.peers: weights copied from torch.nn into course_lib, and read out of torch.nn
into the dicts chapter 3's layer exercises take (checked by a plain computation with them)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import peers
from course_lib import transformer as tf
from course_lib.attention import causal_mask

pytestmark = pytest.mark.ch03

D, H, D_FF = 12, 3, 20


def _attend(q_in: torch.Tensor, kv_in: torch.Tensor, w: dict, a: str, b: str, h: int,
            mask: torch.Tensor | None) -> torch.Tensor:
    """Multi-head attention from the dict's weights, written out (``x @ W.T + b``)."""
    B, T, d = q_in.shape
    S = kv_in.shape[1]
    q = (q_in @ w[f"{a}_q"].T + w[f"{b}_q"]).view(B, T, h, d // h).transpose(1, 2)
    k = (kv_in @ w[f"{a}_k"].T + w[f"{b}_k"]).view(B, S, h, d // h).transpose(1, 2)
    v = (kv_in @ w[f"{a}_v"].T + w[f"{b}_v"]).view(B, S, h, d // h).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
    return out @ w[f"{a}_o"].T + w[f"{b}_o"]


def _ffn(x: torch.Tensor, w: dict) -> torch.Tensor:
    return torch.relu(x @ w["w_1"].T + w["b_1"]) @ w["w_2"].T + w["b_2"]


def _ln(x: torch.Tensor, w: dict, i: int) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w[f"gamma_{i}"], w[f"beta_{i}"], 1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_weights_name_what_torch_computes(norm_first: bool) -> None:
    layer = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True,
                                       norm_first=norm_first).double().eval()
    peers.randomize_(layer, seed=1)
    w = peers.encoder_layer_weights(layer)
    assert w["w_1"].shape == (D_FF, D) and w["w_2"].shape == (D, D_FF)
    x = torch.randn(2, 5, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def attn(z: torch.Tensor) -> torch.Tensor:
        return _attend(z, z, w, "w", "b", H, None)

    if norm_first:
        y = x + attn(_ln(x, w, 1))
        y = y + _ffn(_ln(y, w, 2), w)
    else:
        y = _ln(x + attn(x), w, 1)
        y = _ln(y + _ffn(y, w), w, 2)
    torch.testing.assert_close(y, layer(x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_weights_name_what_torch_computes(norm_first: bool) -> None:
    layer = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True,
                                       norm_first=norm_first).double().eval()
    peers.randomize_(layer, seed=3)
    w = peers.decoder_layer_weights(layer)
    g = torch.Generator().manual_seed(4)
    y = torch.randn(2, 4, D, dtype=torch.float64, generator=g)
    m = torch.randn(2, 6, D, dtype=torch.float64, generator=g)
    causal = causal_mask(4)

    def self_attn(z: torch.Tensor) -> torch.Tensor:
        return _attend(z, z, w, "w", "b", H, causal)

    def cross_attn(z: torch.Tensor) -> torch.Tensor:
        return _attend(z, m, w, "wc", "bc", H, None)

    if norm_first:
        out = y + self_attn(_ln(y, w, 1))
        out = out + cross_attn(_ln(out, w, 2))
        out = out + _ffn(_ln(out, w, 3), w)
    else:
        out = _ln(y + self_attn(y), w, 1)
        out = _ln(out + cross_attn(out), w, 2)
        out = _ln(out + _ffn(out, w), w, 3)
    torch.testing.assert_close(out, layer(y, m, tgt_mask=~causal), rtol=1e-10, atol=1e-10)


def test_randomize_is_seeded_and_touches_every_parameter() -> None:
    a = peers.randomize_(nn.TransformerEncoderLayer(D, H, D_FF, batch_first=True), seed=5)
    b = peers.randomize_(nn.TransformerEncoderLayer(D, H, D_FF, batch_first=True), seed=5)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, torch.zeros_like(pa))
        assert not torch.equal(pa, torch.ones_like(pa))
    assert not torch.equal(a.self_attn.in_proj_weight[:D], a.self_attn.in_proj_weight[:D].T)


def test_copy_into_wrong_sizes_fails() -> None:
    theirs = nn.TransformerEncoderLayer(D, H, D_FF, batch_first=True)
    ours = tf.EncoderLayer(2 * D, H, D_FF)
    with pytest.raises(RuntimeError):
        peers.copy_from_torch_encoder_layer(ours, theirs)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_copy_of_a_post_norm_nn_transformer_names_its_extra_final_norms() -> None:
    """torch.nn.Transformer ends both stacks with a LayerNorm in post-norm too; ours does not."""
    config = tf.TransformerConfig(src_vocab_size=5, tgt_vocab_size=5, d_model=D, n_heads=H,
                                  n_encoder_layers=1, n_decoder_layers=1, d_ff=D_FF)
    theirs = nn.Transformer(D, H, 1, 1, D_FF, batch_first=True, norm_first=False)
    assert theirs.encoder.norm is not None and theirs.decoder.norm is not None
    with pytest.raises(ValueError, match="final LayerNorms differ"):
        peers.copy_from_torch_transformer(tf.Transformer(config), theirs)
