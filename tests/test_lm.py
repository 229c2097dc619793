"""Tests of course_lib.lm: BERT and GPT masks, masking, and losses by hand."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import lm
from course_lib import transformer as tf

pytestmark = pytest.mark.ch03


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_bert_and_gpt_masks_by_hand() -> None:
    padding = torch.tensor([[True, True, True], [True, True, False]])
    bert = lm.bert_attention_mask(padding)
    gpt = lm.gpt_attention_mask(padding)
    assert bert.shape == gpt.shape == (2, 1, 3, 3)
    assert bert[0, 0].all()
    assert bert[1, 0].tolist() == [[True, True, False]] * 3
    assert gpt[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert gpt[1, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]


def test_mask_tokens_rules() -> None:
    tokens = torch.arange(4, 4 + 2000).reshape(40, 50) % 30 + 2  # ids 2..31, never the mask id
    special = torch.zeros_like(tokens, dtype=torch.bool)
    special[:, 0] = True
    inputs, targets = lm.mask_tokens(tokens, mask_id=1, vocab_size=32, generator=_gen(0),
                                     special=special)
    selected = targets != lm.IGNORE_INDEX
    assert not selected[:, 0].any(), "special positions must never be selected"
    assert torch.equal(targets[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])
    frac = selected.float().mean().item()
    assert 0.12 < frac < 0.18
    masked = (inputs == 1) & selected
    kept = (inputs == tokens) & selected
    assert 0.74 < masked.sum().item() / selected.sum().item() < 0.86
    assert 0.05 < kept.sum().item() / selected.sum().item() < 0.16  # 10% kept + random hits
    # Reproducible with the same seed; the documented draw order.
    again = lm.mask_tokens(tokens, 1, 32, generator=_gen(0), special=special)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)
    g = _gen(0)
    u = torch.rand(tokens.shape, generator=g)
    assert torch.equal(selected, (u < 0.15) & ~special)


def test_mlm_and_next_token_losses_by_hand() -> None:
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])  # (1, 3, 3)
    # MLM: only position 0 (target 0) and 2 (target 1) count.
    targets = torch.tensor([[0, lm.IGNORE_INDEX, 1]])
    lse0 = math.log(math.exp(2) + 2)
    lse2 = math.log(math.exp(1) + 2)
    expected = ((lse0 - 2) + (lse2 - 1)) / 2
    assert lm.masked_lm_loss(logits, targets).item() == pytest.approx(expected, rel=1e-6)
    # Next token on tokens [0, 0, 1]: position 0 predicts 0, position 1 predicts 1.
    tokens = torch.tensor([[0, 0, 1]])
    expected = ((lse0 - 2) + math.log(3)) / 2
    assert lm.next_token_loss(logits, tokens).item() == pytest.approx(expected, rel=1e-6)
    # Padding the last token drops the second target.
    padding = torch.tensor([[True, True, False]])
    assert lm.next_token_loss(logits, tokens, padding).item() == pytest.approx(lse0 - 2, rel=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        lm.next_token_loss(logits, tokens[:, :2])


def test_one_encoder_stack_as_bert_and_as_gpt() -> None:
    """Changing the last token moves every output under BERT's mask, only the last under GPT's."""
    config = tf.TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=4,
                                  n_encoder_layers=2, d_ff=32, dropout=0.0, norm_first=True)
    torch.manual_seed(0)
    body = tf.Encoder(config).double().eval()
    x = torch.randn(1, 6, 16, dtype=torch.float64, generator=_gen(0))
    changed = x.clone()
    changed[:, -1] = torch.randn(16, dtype=torch.float64, generator=_gen(1))  # LN ignores a shift
    padding = torch.ones(1, 6, dtype=torch.bool)
    bert = (body(x, lm.bert_attention_mask(padding))[0]
            - body(changed, lm.bert_attention_mask(padding))[0]).abs().amax(-1)[0]
    gpt = (body(x, lm.gpt_attention_mask(padding))[0]
           - body(changed, lm.gpt_attention_mask(padding))[0]).abs().amax(-1)[0]
    assert bool((bert > 1e-6).all())
    assert (gpt > 1e-6).tolist() == [False] * 5 + [True]


def test_mask_tokens_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        lm.mask_tokens(torch.zeros(5, dtype=torch.long), 1, 8)
    with pytest.raises(ValueError, match="special must be boolean"):
        lm.mask_tokens(torch.zeros(2, 5, dtype=torch.long), 1, 8, special=torch.zeros(2, 5))
