"""Tests of course_lib.seq2seq: the two encoder-decoders, the loss, the step interface."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import alignment, data, decoding, seq2seq
from course_lib.exercises.seq2seq import offset_weights
from course_lib.seq2seq import (
    AttentionSeq2Seq,
    Encoder,
    Seq2Seq,
    Seq2SeqConfig,
    attention_decoder_step,
    sequence_loss,
)
from course_lib.training import TrainConfig, train

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SPLITS = data.date_task(data.DateTaskConfig(n_train=64, n_val=8, n_test=8, seed=5))
CFG = Seq2SeqConfig(len(SPLITS.src_vocab), len(SPLITS.tgt_vocab), emb_dim=8, hidden_dim=16,
                    attn_dim=12)


def batch(n: int = 5) -> data.Batch:
    return data.collate(SPLITS.train[:n], SPLITS.src_vocab, SPLITS.tgt_vocab)


# Known answers ------------------------------------------------------------------------------

def test_sequence_loss_known_answers() -> None:
    uniform = sequence_loss(torch.zeros(2, 3, 5), torch.tensor([[1, 2, 0], [4, 0, 0]]))
    assert math.isclose(uniform.item(), math.log(5), rel_tol=1e-6)
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, -5.0]]])  # p(1) = 3/4 at position 0
    assert math.isclose(sequence_loss(logits, torch.tensor([[1, 0]])).item(), -math.log(0.75),
                        rel_tol=1e-6)
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        sequence_loss(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))


def test_padding_positions_do_not_count() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 6, generator=g)
    targets = torch.tensor([[3, 4, 0, 0], [5, 1, 2, 0]])
    other = logits.clone()
    other[targets == 0] = 100 * torch.randn(int((targets == 0).sum()), 6, generator=g)
    assert torch.allclose(sequence_loss(logits, targets), sequence_loss(other, targets))


# Properties ---------------------------------------------------------------------------------

def test_encoder_ignores_padding() -> None:
    torch.manual_seed(0)
    enc = Encoder(CFG)
    b = batch(4)
    ann, final = enc(b.src, b.src_mask)
    for i in range(4):
        n = int(b.src_mask[i].sum())
        ann_i, final_i = enc(b.src[i:i + 1, :n], b.src_mask[i:i + 1, :n])
        torch.testing.assert_close(ann[i:i + 1, :n], ann_i)
        torch.testing.assert_close(final[i:i + 1], final_i)
        assert (ann[i, n:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("Model", [Seq2Seq, AttentionSeq2Seq])
def test_shapes_and_step_interface_agree_with_teacher_forcing(Model, device: str) -> None:
    torch.manual_seed(0)
    model = Model(CFG).to(device).eval()
    b = batch(5).to(device)
    logits = model(b.src, b.src_mask, b.tgt_in)
    assert logits.shape == (*b.tgt_in.shape, CFG.tgt_vocab_size) and logits.device.type == device
    step = model.make_step(b.src, b.src_mask)
    for t in (1, 4, b.tgt_in.shape[1]):
        torch.testing.assert_close(step(b.tgt_in[:, :t]), logits[:, t - 1])
    # A batch of one source serves several hypotheses (beam search).
    one = model.make_step(b.src[:1], b.src_mask[:1])
    hyps = b.tgt_in[:3, :4]
    torch.testing.assert_close(
        one(hyps), model(b.src[:1].expand(3, -1), b.src_mask[:1].expand(3, -1), hyps)[:, -1])
    tokens, score = decoding.beam_search(one, torch.tensor([CFG.bos_id], device=device), 3, 12,
                                         CFG.eos_id)
    assert tokens[0] == CFG.bos_id and score.item() <= 0


def test_attention_weights_are_distributions_over_real_source_tokens() -> None:
    torch.manual_seed(0)
    model = AttentionSeq2Seq(CFG)
    b = batch(6)
    logits, w = model(b.src, b.src_mask, b.tgt_in, return_attention=True)
    assert w.shape == (6, b.tgt_in.shape[1], b.src.shape[1])
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]))
    assert (w.masked_select(~b.src_mask[:, None, :].expand_as(w)) == 0).all()
    with pytest.raises(ValueError, match="no attention"):
        Seq2Seq(CFG)(b.src, b.src_mask, b.tgt_in, return_attention=True)


def test_decoder_step_scores_are_bahdanaus_additive_score() -> None:
    """Peer check: the step's weights are masked_softmax(additive_score(s_{t-1}, h))."""
    torch.manual_seed(0)
    model = AttentionSeq2Seq(CFG)
    b = batch(4)
    memory, keys, mask, state = model.encode(b.src, b.src_mask)
    _, new_state, w = attention_decoder_step(b.tgt_in[:, 0], state, memory, keys, mask,
                                             model.embedding, model.cell, model.W_q.weight,
                                             model.v, model.out)
    scores = alignment.additive_score(state[:, None, :], memory, model.W_q.weight,
                                      model.W_k.weight, model.v)
    _, expected = alignment.context_vector(scores, memory, mask[:, None, :])
    torch.testing.assert_close(w, expected[:, 0])
    assert new_state.shape == state.shape


def test_models_have_comparable_sizes() -> None:
    n = [sum(p.numel() for p in M(CFG).parameters()) for M in (Seq2Seq, AttentionSeq2Seq)]
    assert 0.8 < n[0] / n[1] < 1.25


def test_attention_model_learns_a_few_dates() -> None:
    """Training works end to end: the loss falls and a handful of dates are learnt exactly."""
    torch.manual_seed(0)
    model = AttentionSeq2Seq(Seq2SeqConfig(len(SPLITS.src_vocab), len(SPLITS.tgt_vocab),
                                           emb_dim=16, hidden_dim=32, attn_dim=32))
    pairs = SPLITS.train[:8]
    b = data.collate(pairs, SPLITS.src_vocab, SPLITS.tgt_vocab)
    hist = train(model, [b], seq2seq.teacher_forcing_loss,
                 TrainConfig(steps=150, lr=1e-2, progress=False))
    assert hist.train_loss[-1] < 0.05 * hist.train_loss[0]
    assert seq2seq.exact_match(model, pairs, SPLITS.src_vocab, SPLITS.tgt_vocab) == 1.0
    assert model.training  # translate restores the mode
    by_length = seq2seq.accuracy_by_length(model, pairs, SPLITS.src_vocab, SPLITS.tgt_vocab)
    assert set(by_length) == {len(s) for s, _ in pairs}
    assert all(0 <= a <= 1 for a in by_length.values())
    outputs = seq2seq.translate(model, [s for s, _ in pairs], SPLITS.src_vocab, SPLITS.tgt_vocab)
    assert outputs == [t for _, t in pairs]


def test_empty_source_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one real token"):
        Encoder(CFG)(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="exact_match needs"):
        seq2seq.exact_match(Seq2Seq(CFG), [], SPLITS.src_vocab, SPLITS.tgt_vocab)


def test_a_zero_score_vector_makes_attention_uniform_over_real_tokens() -> None:
    """Chapter 1's ablation: with v = 0 every score is 0, so each step averages the real tokens."""
    torch.manual_seed(0)
    model = AttentionSeq2Seq(CFG)
    with torch.no_grad():
        model.v.zero_()
    b = batch(4)
    _, w = model(b.src, b.src_mask, b.tgt_in, return_attention=True)
    lengths = b.src_mask.sum(-1, keepdim=True)  # (B, 1)
    expected = (b.src_mask / lengths)[:, None, :].expand_as(w)  # (B, T, S)
    torch.testing.assert_close(w, expected.to(w.dtype))


def _prefix_tree_loss(targets: list[str]) -> float:
    """The teacher-forced loss of the decoder that predicts each next token (or <eos>) with the
    frequencies of the targets sharing the prefix: a decoder of equation (3) can be this one."""
    total = 0.0
    for y in targets:
        for t in range(len(y) + 1):  # the tokens of y, then <eos>
            prefix = [z for z in targets if z.startswith(y[:t])]
            nxt = [z[t] if t < len(z) else "<eos>" for z in prefix]
            token = y[t] if t < len(y) else "<eos>"
            total -= math.log(nxt.count(token) / len(nxt))
    return total


@pytest.mark.parametrize("targets", [["12", "13"], ["1234", "5678"], ["1", "2", "3", "3"],
                                     ["2021-03-02"] * 3, ["12", "123", "12", "9"],
                                     ["0415"], ["a", "ab", "abc", "abcd"]])
def test_collision_loss_bound_is_reached_by_the_prefix_tree_decoder(targets: list[str]) -> None:
    """The bound m H is what the best shared distribution scores under teacher forcing."""
    bound = seq2seq.collision_loss_bound(targets)
    assert math.isclose(bound, _prefix_tree_loss(targets), rel_tol=1e-12, abs_tol=1e-12)


def test_collision_loss_bound_by_hand() -> None:
    assert seq2seq.collision_loss_bound(["0415"]) == 0.0
    assert math.isclose(seq2seq.collision_loss_bound(["12", "34"]), 2 * math.log(2))
    assert math.isclose(seq2seq.collision_loss_bound(["1", "2", "3", "3"]), 6 * math.log(2))
    with pytest.raises(ValueError, match="non-empty"):
        seq2seq.collision_loss_bound([])


@pytest.mark.parametrize("offset", [0, 1, -1, 5, -40, 300])
@pytest.mark.parametrize("n", [2, 17, 2000])
def test_offset_attention_puts_the_weight_on_key_i_plus_offset(offset: int, n: int) -> None:
    """With d_a = 2 units, the design attends to key i + offset on any source length."""
    W_q, W_k, v = seq2seq.offset_attention(offset, n)
    assert (W_q.shape, W_k.shape, v.shape) == ((2, 2), (2, 2), (2,))
    weights = offset_weights(W_q, W_k, v, n)
    rows = torch.tensor([i for i in range(n) if 0 <= i + offset < n], dtype=torch.long)
    if len(rows):
        assert weights[rows, rows + offset].min() >= 0.99
    torch.testing.assert_close(weights.sum(-1), torch.ones(n, dtype=torch.float64))


def test_one_tanh_unit_cannot_attend_to_an_inner_key() -> None:
    """A single unit's score is monotone in j: its weights peak at an end of the source."""
    W_q = torch.tensor([[-0.3, 0.1], [0.0, 0.0]], dtype=torch.float64)
    W_k = torch.tensor([[0.3, 0.0], [0.0, 0.0]], dtype=torch.float64)
    for v in (torch.tensor([5.0, 0.0], dtype=torch.float64),
              torch.tensor([-5.0, 0.0], dtype=torch.float64)):
        peaks = offset_weights(W_q, W_k, v, 9).argmax(-1)
        assert set(peaks.tolist()) <= {0, 8}
