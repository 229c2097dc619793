"""Tests of course_lib.counting: every formula equals sum(p.numel()) of a built model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import counting
from course_lib import transformer as tf

pytestmark = pytest.mark.ch03




@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("tie", [False, True])
def test_parameter_formula_equals_numel(norm_first: bool, tie: bool) -> None:
    vocab_t = 17 if tie else 19
    config = tf.TransformerConfig(src_vocab_size=17, tgt_vocab_size=vocab_t, d_model=24,
                                  n_heads=3, n_encoder_layers=2, n_decoder_layers=3, d_ff=40,
                                  norm_first=norm_first, tie_embeddings=tie)
    model = tf.Transformer(config)
    assert counting.transformer_params(config)["total"] == counting.count_parameters(model)
    assert counting.encoder_layer_params(24, 40) == counting.count_parameters(model.encoder.layers[0])
    assert counting.decoder_layer_params(24, 40) == counting.count_parameters(model.decoder.layers[0])
    d = 24
    assert counting.encoder_layer_params(d, 40) == 4 * d * d + 4 * d + 2 * d * 40 + 40 + d + 4 * d


def test_gpt_rule_of_thumb_close_for_wide_models() -> None:
    d, L = 768, 12  # GPT-2 small: 12 d^2 L = 85M, the exact stack count is within 0.5%
    exact = L * counting.encoder_layer_params(d, 4 * d)
    assert abs(exact - counting.gpt_params_approx(d, L)) / exact < 0.005


def test_gpt_rule_of_thumb_against_a_built_stack() -> None:
    """A decoder-only (GPT) body is an encoder stack run with a causal mask: 12 d^2 L, roughly."""
    d, L = 128, 2
    config = tf.TransformerConfig(src_vocab_size=2, tgt_vocab_size=2, d_model=d, n_heads=4,
                                  n_encoder_layers=L, d_ff=4 * d)
    numel = counting.count_parameters(tf.Encoder(config))
    assert numel == L * counting.encoder_layer_params(d, 4 * d)
    assert abs(numel - counting.gpt_params_approx(d, L)) / numel < 0.01


@pytest.mark.parametrize("d", [8, 64, 768])
def test_layer_shares_sum_to_one_and_the_ffn_holds_about_two_thirds(d: int) -> None:
    shares = counting.layer_shares(d)
    assert sum(shares.values()) == pytest.approx(1.0)
    # 8 d^2 of 12 d^2 when biases and norms are neglected; they matter only for tiny d.
    assert shares["ffn"] == pytest.approx(2 / 3, abs=0.02 if d >= 64 else 0.05)
    layer = tf.EncoderLayer(d, 4, 4 * d)
    assert shares["ffn"] == pytest.approx(counting.count_parameters(layer.ff)
                                          / counting.count_parameters(layer))
