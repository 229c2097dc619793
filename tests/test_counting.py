"""Tests of course_lib.counting: every formula equals sum(p.numel()) of a built model."""

from __future__ import annotations

import pytest
import torch

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
    count = counting.count_parameters
    assert counting.encoder_layer_params(24, 40) == count(model.encoder.layers[0])
    assert counting.decoder_layer_params(24, 40) == count(model.decoder.layers[0])
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


# --------------------------------------------------------------------------------------------
# Chapter 5: GPT-style models with every convention an argument
# --------------------------------------------------------------------------------------------


@pytest.mark.ch05
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(16, 1, 2, 83, 64), (24, 3, 4, 101, 32), (8, 0, 2, 5, 7)])
def test_gpt_param_count_equals_a_built_course_lib_gpt(shape, bias: bool) -> None:
    from course_lib.gpt import GPT, GPTConfig
    d, L, h, V, T = shape
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=h, n_embd=d, bias=bias))
    parts = counting.gpt_param_parts(d, L, V, T, biases=bias)
    assert parts["total"] == counting.count_parameters(model)
    embeddings = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    assert parts["non_embedding"] == counting.count_parameters(model) - embeddings
    mlp = sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n)
    attn = sum(p.numel() for n, p in model.named_parameters() if ".attn." in n)
    assert (parts["mlp"], parts["attention"]) == (mlp, attn)


def _hf_gpt2_count(n_layer: int, n_embd: int, n_head: int, tied: bool = True,
                   vocab: int = counting.GPT2_VOCAB, n_ctx: int = counting.GPT2_CTX) -> int:
    """Parameters of Hugging Face's GPT2LMHeadModel built on the meta device (no weights)."""
    import transformers  # a development requirement: the independent peer
    config = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                                     vocab_size=vocab, n_positions=n_ctx,
                                     tie_word_embeddings=tied)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.ch05
@pytest.mark.parametrize("name", list(counting.GPT2_SHAPES))
def test_gpt2_published_counts_by_formula_and_by_huggingface(name: str) -> None:
    L, d, h = counting.GPT2_SHAPES[name]
    formula = counting.gpt_param_count(d, L, counting.GPT2_VOCAB, counting.GPT2_CTX)
    assert formula == counting.GPT2_PUBLISHED[name] == _hf_gpt2_count(L, d, h)


@pytest.mark.ch05
def test_untied_count_matches_huggingface_untied() -> None:
    formula = counting.gpt_param_count(64, 3, 500, 128, tied=False)
    assert formula == _hf_gpt2_count(3, 64, 4, tied=False, vocab=500, n_ctx=128)
    assert formula - counting.gpt_param_count(64, 3, 500, 128) == 500 * 64


@pytest.mark.ch05
@pytest.mark.parametrize("row", counting.GPT3_TABLE, ids=lambda r: r.name)
def test_gpt3_table_by_formula_within_three_percent(row: counting.GPT3Row) -> None:
    n = counting.gpt_param_count(row.d_model, row.n_layers, counting.GPT3_VOCAB,
                                 counting.GPT3_CTX)
    assert abs(n / row.n_params - 1) < 0.03, (row.name, n)


@pytest.mark.ch05
def test_gpt3_table_inconsistencies_are_the_xl_and_13b_rows() -> None:
    assert counting.gpt3_inconsistencies() == ["GPT-3 XL", "GPT-3 13B"]
    row = next(r for r in counting.GPT3_TABLE if r.name == "GPT-3 13B")
    assert row.n_heads * row.d_head == 5120 != row.d_model  # 5140 printed; both within 3%
    n = counting.gpt_param_count(5120, 40, counting.GPT3_VOCAB, counting.GPT3_CTX)
    assert abs(n / 13e9 - 1) < 0.03


@pytest.mark.ch05
@pytest.mark.parametrize("d", [64, 768, 12288])
def test_the_mlp_holds_about_two_thirds_of_a_block(d: int) -> None:
    parts = counting.gpt_param_parts(d, 1, 10, 1)
    block = parts["attention"] + parts["mlp"] + parts["norms"] - 2 * d  # less the final norm
    share = parts["mlp"] / block
    assert share == pytest.approx(counting.layer_shares(d)["ffn"], rel=1e-12)
    assert abs(share - 2 / 3) < 0.01


@pytest.mark.ch05
def test_gpt_param_count_rejects_a_bad_shape() -> None:
    with pytest.raises(ValueError, match="d_model"):
        counting.gpt_param_count(0, 2, 10, 4)
