"""Tests of course_lib.transformer: known answers, properties, and peers (torch.nn.Transformer*)."""

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

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}
D, H, D_FF = 16, 4, 32


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _padding(lengths: list[int], T: int, device: str) -> torch.Tensor:
    return torch.arange(T, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]


# --------------------------------------------------------------------------------------------
# Peer equivalence with copied weights
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(device: str, dtype: torch.dtype, norm_first: bool) -> None:
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first)
    ours = tf.EncoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first)
    peers.copy_from_torch_encoder_layer(ours, theirs)
    theirs.to(device, dtype).eval()
    ours.to(device, dtype).eval()
    x = torch.randn(3, 6, D, generator=_gen(1), dtype=dtype).to(device)
    padding = _padding([6, 4, 1], 6, device)  # True = real token
    got, _ = ours(x, mask=tf.key_padding_mask(padding))
    expected = theirs(x, src_key_padding_mask=~padding)  # torch: True = NOT allowed
    # torch's fast path may emit zeros at padded query rows; compare the real positions.
    torch.testing.assert_close(got[padding], expected[padding], **TOL[dtype])
    # A full (T, T) attention mask too: causal.
    got, _ = ours(x, mask=causal_mask(6, device))
    expected = theirs(x, src_mask=~causal_mask(6, device))
    torch.testing.assert_close(got, expected, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(device: str, dtype: torch.dtype, norm_first: bool) -> None:
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first)
    ours = tf.DecoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first)
    peers.copy_from_torch_decoder_layer(ours, theirs)
    theirs.to(device, dtype).eval()
    ours.to(device, dtype).eval()
    y = torch.randn(2, 5, D, generator=_gen(2), dtype=dtype).to(device)
    memory = torch.randn(2, 7, D, generator=_gen(3), dtype=dtype).to(device)
    src_padding = _padding([7, 3], 7, device)
    self_mask = causal_mask(5, device)
    got, _ = ours(y, memory, self_mask=self_mask, memory_mask=tf.key_padding_mask(src_padding))
    expected = theirs(y, memory, tgt_mask=~self_mask, memory_key_padding_mask=~src_padding)
    torch.testing.assert_close(got, expected, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_encoder_decoder_body_matches_nn_transformer(device: str, dtype: torch.dtype,
                                                     norm_first: bool) -> None:
    torch.manual_seed(0)
    config = tf.TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=D, n_heads=H,
                                  n_encoder_layers=2, n_decoder_layers=3, d_ff=D_FF, dropout=0.0,
                                  norm_first=norm_first)
    theirs = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=3,
                            dim_feedforward=D_FF, dropout=0.0, activation="relu",
                            batch_first=True, norm_first=norm_first)
    if not norm_first:  # post-norm stacks end normalised already; ours has no final norms
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    ours = tf.Transformer(config)
    peers.copy_from_torch_transformer(ours, theirs)
    theirs.to(device, dtype).eval()
    ours.to(device, dtype).eval()
    src = torch.randint(11, (2, 6), generator=_gen(4)).to(device)
    tgt = torch.randint(13, (2, 4), generator=_gen(5)).to(device)
    src_padding = _padding([6, 2], 6, device)
    x_src = ours.src_embed(src)
    x_tgt = ours.tgt_embed(tgt)
    memory, _ = ours.encoder(x_src, tf.key_padding_mask(src_padding))
    got, _ = ours.decoder(x_tgt, memory, causal_mask(4, device), tf.key_padding_mask(src_padding))
    expected = theirs(x_src, x_tgt, tgt_mask=~causal_mask(4, device),
                      src_key_padding_mask=~src_padding, memory_key_padding_mask=~src_padding)
    torch.testing.assert_close(got, expected, **TOL[dtype])
    # And the model's own decode path gives lm_head of the same body output.
    logits, _ = ours.decode(tgt, ours.encode(src, src_padding)[0], src_padding)
    torch.testing.assert_close(logits, ours.lm_head(expected), **TOL[dtype])


# --------------------------------------------------------------------------------------------
# Known answers
# --------------------------------------------------------------------------------------------


def test_feed_forward_known_answer_and_memory_reading() -> None:
    ff = tf.FeedForward(2, 3)
    with torch.no_grad():
        ff.linear1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))
        ff.linear1.bias.zero_()
        ff.linear2.weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
        ff.linear2.bias.copy_(torch.tensor([0.5, -0.5]))
    x = torch.tensor([[2.0, -1.0]])
    # coefficients relu([2, -1, -1]) = [2, 0, 0]; output 2 * value_0 + b2 = 2 * [1, 4] + b2
    torch.testing.assert_close(ff.memory_coefficients(x), torch.tensor([[2.0, 0.0, 0.0]]))
    torch.testing.assert_close(ff(x), torch.tensor([[2.5, 7.5]]))
    # Sum of coefficient-weighted values plus b2 is the output, for random inputs too.
    x = torch.randn(4, 2, generator=_gen(0))
    coeffs = ff.memory_coefficients(x)  # (4, 3)
    torch.testing.assert_close(ff(x), coeffs @ ff.values + ff.linear2.bias)
    assert ff.keys.shape == (3, 2) and ff.values.shape == (3, 2)


def test_embedding_scales_tokens_and_adds_the_sinusoidal_table() -> None:
    embed = tf.Embedding(5, 8, max_len=10).double()
    tokens = torch.tensor([[3, 1, 4]])
    x = embed(tokens)
    t, i = 2, 1  # position 2, frequency 1: sin(2 / 10000^(2/8)) in column 2
    expected = embed.tok.weight[4, 2] * math.sqrt(8) + math.sin(t / 10000 ** (2 * i / 8))
    assert x[0, t, 2 * i].item() == pytest.approx(expected.item(), abs=1e-6)
    assert embed.pe.shape == (10, 8) and "pe" not in embed.state_dict()


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_places_the_norm(norm_first: bool) -> None:
    norm = nn.LayerNorm(4).double()
    peers.randomize_(norm, seed=0)
    x = torch.randn(2, 3, 4, generator=_gen(0), dtype=torch.float64)

    def f(z: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.tanh(z), None

    got, weights = tf.sublayer(x, f, norm, nn.Identity(), norm_first)
    expected = x + torch.tanh(norm(x)) if norm_first else norm(x + torch.tanh(x))
    torch.testing.assert_close(got, expected)
    assert weights is None


def test_tie_embeddings_needs_one_vocabulary() -> None:
    with pytest.raises(ValueError, match="shared vocabulary"):
        tf.Transformer(tf.TransformerConfig(src_vocab_size=5, tgt_vocab_size=6,
                                            tie_embeddings=True))


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


def _small_model(norm_first: bool = False, dtype: torch.dtype = torch.float64) -> tf.Transformer:
    torch.manual_seed(0)
    config = tf.TransformerConfig(src_vocab_size=9, tgt_vocab_size=10, d_model=D, n_heads=H,
                                  d_ff=D_FF, dropout=0.0, norm_first=norm_first)
    return tf.Transformer(config).to(dtype).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_decoder_ignores_the_future(norm_first: bool) -> None:
    model = _small_model(norm_first)
    src = torch.randint(9, (2, 5), generator=_gen(0))
    tgt = torch.randint(10, (2, 6), generator=_gen(1))
    base = model(src, None, tgt)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t:] = (changed[:, t:] + 1) % 10
        out = model(src, None, changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=1e-10, atol=1e-10)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-6, "position t must see token t"


def test_the_ablated_decoder_sees_the_future() -> None:
    """causal_decoder=False (chapter 3's ablation): a change at position t moves earlier outputs."""
    config = tf.TransformerConfig(src_vocab_size=9, tgt_vocab_size=10, d_model=D, n_heads=H,
                                  d_ff=D_FF, dropout=0.0, causal_decoder=False)
    torch.manual_seed(0)
    model = tf.Transformer(config).double().eval()
    src = torch.randint(9, (1, 5), generator=_gen(0))
    tgt = torch.randint(10, (1, 6), generator=_gen(1))
    changed = tgt.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 10
    assert (model(src, None, tgt)[:, 0] - model(src, None, changed)[:, 0]).abs().max() > 1e-6


def test_padded_source_keys_are_ignored() -> None:
    model = _small_model()
    src = torch.randint(9, (1, 6), generator=_gen(0))
    tgt = torch.randint(10, (1, 4), generator=_gen(1))
    padding = _padding([4], 6, "cpu")
    base = model(src, padding, tgt)
    changed = src.clone()
    changed[:, 4:] = (changed[:, 4:] + 3) % 9
    torch.testing.assert_close(model(changed, padding, tgt), base, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_without_positions_is_permutation_equivariant(norm_first: bool) -> None:
    config = tf.TransformerConfig(src_vocab_size=9, tgt_vocab_size=9, d_model=D, n_heads=H,
                                  d_ff=D_FF, dropout=0.0, norm_first=norm_first)
    torch.manual_seed(0)
    encoder = tf.Encoder(config).double().eval()
    x = torch.randn(2, 7, D, generator=_gen(0), dtype=torch.float64)
    perm = torch.randperm(7, generator=_gen(1))
    out, _ = encoder(x)
    out_perm, _ = encoder(x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], rtol=1e-10, atol=1e-10)
    # With positions the embedding breaks the symmetry.
    embed = tf.Embedding(9, D, 16).double()
    tokens = torch.randint(9, (1, 7), generator=_gen(2))
    with_pos, _ = encoder(embed(tokens))
    perm_pos, _ = encoder(embed(tokens[:, perm]))
    assert (perm_pos - with_pos[:, perm]).abs().max() > 1e-3
    embed.positions = False
    a, _ = encoder(embed(tokens))
    b, _ = encoder(embed(tokens[:, perm]))
    torch.testing.assert_close(b, a[:, perm], rtol=1e-10, atol=1e-10)


def test_attention_maps_shapes_rows_and_padding() -> None:
    model = _small_model()
    src = torch.randint(9, (2, 5), generator=_gen(0))
    tgt = torch.randint(10, (2, 3), generator=_gen(1))
    padding = _padding([5, 2], 5, "cpu")
    maps = model.attention_maps(src, tgt, padding)
    L = model.config.n_encoder_layers
    assert maps["encoder"].shape == (L, 2, H, 5, 5)
    assert maps["decoder_self"].shape == (model.config.n_decoder_layers, 2, H, 3, 3)
    assert maps["decoder_cross"].shape == (model.config.n_decoder_layers, 2, H, 3, 5)
    for w in maps.values():
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert maps["decoder_cross"][:, 1, :, :, 2:].abs().max() == 0
    assert maps["decoder_self"].triu(1).abs().max() == 0


def test_dropout_only_in_training() -> None:
    config = tf.TransformerConfig(src_vocab_size=9, tgt_vocab_size=10, d_model=D, n_heads=H,
                                  d_ff=D_FF, dropout=0.5)
    model = tf.Transformer(config)
    src = torch.randint(9, (2, 5), generator=_gen(0))
    tgt = torch.randint(10, (2, 3), generator=_gen(1))
    model.train()
    assert not torch.equal(model(src, None, tgt), model(src, None, tgt))
    model.eval()
    assert torch.equal(model(src, None, tgt), model(src, None, tgt))


@pytest.mark.parametrize("device", DEVICES)
def test_step_matches_teacher_forcing_and_beam_layout(device: str) -> None:
    model = _small_model().to(device)
    src = torch.randint(9, (2, 5), generator=_gen(0)).to(device)
    tgt = torch.randint(10, (2, 4), generator=_gen(1)).to(device)
    full = model(src, None, tgt)
    step = model.make_step(src)
    for t in range(1, 5):
        torch.testing.assert_close(step(tgt[:, :t]), full[:, t - 1], rtol=1e-10, atol=1e-10)
    # Three hypotheses per source, source-major: rows 0-2 use source 0, rows 3-5 source 1.
    beams = tgt.repeat_interleave(3, dim=0)
    torch.testing.assert_close(step(beams), full[:, -1].repeat_interleave(3, dim=0),
                               rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="multiple"):
        step(tgt[:1])


# --------------------------------------------------------------------------------------------
# Errors that name the problem
# --------------------------------------------------------------------------------------------


def test_clear_errors() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        tf.EncoderLayer(10, 3, 8)
    layer = tf.EncoderLayer(8, 2, 16)
    with pytest.raises(ValueError, match=r"\(batch, length, d_model=8\), got \(2, 3, 5\)"):
        layer(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\) does not broadcast"):
        layer(torch.randn(2, 3, 8), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        layer(torch.randn(2, 3, 8), mask=torch.ones(3, 3))
    dec = tf.DecoderLayer(8, 2, 16)
    with pytest.raises(ValueError, match="memory batch 3 differs"):
        dec(torch.randn(2, 3, 8), torch.randn(3, 4, 8))
    model = _small_model()
    src = torch.randint(9, (2, 5))
    with pytest.raises(ValueError,
                       match=r"src_padding must be boolean with the shape of the tokens"):
        model.encode(src, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="outside"):
        model.encode(torch.full((1, 3), 9))
    with pytest.raises(ValueError, match="max_len"):
        model.encode(torch.zeros(1, model.config.max_len + 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        model.encode(torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("device", DEVICES)
def test_chapter1_decoders_run_on_the_model(device: str) -> None:
    from course_lib import decoding

    model = _small_model().to(device)
    src = torch.randint(9, (3, 5), generator=_gen(0)).to(device)
    bos, eos = 1, 2
    prompt = torch.full((3, 1), bos, device=device)
    out = decoding.greedy_decode(model.make_step(src), prompt, max_new_tokens=6)
    assert out.shape == (3, 7) and torch.equal(out[:, 0], prompt[:, 0])
    # Greedy by hand with teacher-forced full passes: the same tokens.
    tokens = prompt
    for _ in range(6):
        nxt = model(src, None, tokens)[:, -1].argmax(-1)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    assert torch.equal(out, tokens)
    # Beam search of width 1 is greedy search; a wider beam scores at least as well.
    step = model.make_step(src[:1])
    greedy, greedy_score = decoding.beam_search(step, prompt[0], 1, 6, eos_id=eos)
    wide, wide_score = decoding.beam_search(step, prompt[0], 4, 6, eos_id=eos)
    assert torch.equal(greedy, decoding.greedy_decode(step, prompt[:1], 6, eos)[0][:len(greedy)])
    assert wide_score >= greedy_score - 1e-12


def test_chapter1_training_and_scoring_helpers_take_the_model() -> None:
    from course_lib import data, seq2seq

    splits = data.date_task(data.DateTaskConfig(n_train=16, n_val=1, n_test=8))
    config = tf.TransformerConfig(src_vocab_size=len(splits.src_vocab),
                                  tgt_vocab_size=len(splits.tgt_vocab), d_model=D, n_heads=H,
                                  d_ff=D_FF, dropout=0.0, max_len=64)
    model = tf.Transformer(config)
    batch = data.collate(splits.train, splits.src_vocab, splits.tgt_vocab)
    loss = seq2seq.teacher_forcing_loss(model, batch)
    expected = F.cross_entropy(model(batch.src, batch.src_mask, batch.tgt_in).flatten(0, 1),
                                  batch.tgt_out.flatten(), ignore_index=0)
    torch.testing.assert_close(loss, expected)
    acc = seq2seq.exact_match(model, splits.test, splits.src_vocab, splits.tgt_vocab)
    assert 0.0 <= acc <= 1.0


def test_fast_and_reference_attention_paths_agree() -> None:
    kwargs = dict(src_vocab_size=9, tgt_vocab_size=10, d_model=D, n_heads=H, d_ff=D_FF,
                  dropout=0.0)
    torch.manual_seed(0)
    fast = tf.Transformer(tf.TransformerConfig(**kwargs, attn_impl="fast")).double().eval()
    ref = tf.Transformer(tf.TransformerConfig(**kwargs, attn_impl="reference")).double().eval()
    ref.load_state_dict(fast.state_dict())
    src = torch.randint(9, (2, 5), generator=_gen(0))
    tgt = torch.randint(10, (2, 4), generator=_gen(1))
    padding = _padding([5, 3], 5, "cpu")
    torch.testing.assert_close(fast(src, padding, tgt), ref(src, padding, tgt),
                               rtol=1e-10, atol=1e-10)
