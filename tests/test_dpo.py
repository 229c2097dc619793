"""Direct preference optimisation (course_lib.dpo) against a direct computation."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import dpo, gpt

pytestmark = pytest.mark.ch08


def test_dpo_loss_equals_its_definition_from_log_probabilities() -> None:
    g = torch.Generator().manual_seed(0)
    pw, pl, rw, rl = (-30 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    beta = 0.3
    direct = torch.stack([
        -torch.log(1 / (1 + torch.exp(-beta * ((pw[i] - rw[i]) - (pl[i] - rl[i])))))
        for i in range(6)]).mean()
    torch.testing.assert_close(dpo.dpo_loss(pw, pl, rw, rl, beta), direct, rtol=1e-12, atol=1e-12)
    # policy = reference: log 2; a large margin in favour of the chosen: near 0
    assert dpo.dpo_loss(pw, pl, pw, pl, beta).item() == pytest.approx(math.log(2))
    assert dpo.dpo_loss(pw + 100, pl, pw, pl, 1.0).item() < 1e-10
    with pytest.raises(ValueError, match="one shape"):
        dpo.dpo_loss(pw, pl[:3], rw, rl, beta)
    with pytest.raises(ValueError, match="beta"):
        dpo.dpo_loss(pw, pl, rw, rl, 0.0)


def test_completion_logprobs_sum_the_completion_tokens_only() -> None:
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=6, block_size=10, n_layer=1, n_head=2, n_embd=8))
    tokens = torch.randint(6, (3, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = dpo.completion_logprobs(model, tokens, prompt_length=4)
        expected = torch.zeros(3)
        for t in range(4, 7):  # log p(tokens[:, t] | tokens[:, :t]), step by step
            log_p = model.step(tokens[:, :t]).log_softmax(-1)  # (3, V)
            expected += log_p.gather(1, tokens[:, t:t + 1])[:, 0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="prompt_length"):
        dpo.completion_logprobs(model, tokens, 7)


def test_preference_pairs_pair_property_with_no_property_per_prompt() -> None:
    vocab = ["a", "e", "x"]
    samples = torch.tensor([[[2, 0, 0], [2, 1, 0], [2, 0, 2]],   # prompt x: "aa" ok, "ea" not
                            [[2, 1, 1], [2, 1, 0], [2, 0, 1]]])  # no sample with the property
    chosen, rejected = dpo.preference_pairs(samples, 1, vocab)
    assert chosen.tolist() == [[2, 0, 0]] and rejected.tolist() == [[2, 1, 0]]
    with pytest.raises(ValueError, match="no prompt"):
        dpo.preference_pairs(samples[1:], 1, vocab)


def test_dpo_training_raises_the_chosen_margin_and_the_reference_stays_frozen() -> None:
    torch.manual_seed(0)
    config = gpt.GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=1, n_embd=8)
    reference = gpt.GPT(config)
    policy = gpt.GPT(config)
    policy.load_state_dict(reference.state_dict())
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(5, (16, 2), generator=g)
    chosen = torch.cat([prompts, torch.zeros(16, 4, dtype=torch.long)], 1)
    rejected = torch.cat([chosen[:, :2], torch.ones(16, 4, dtype=torch.long)], 1)
    ref_state = {k: v.clone() for k, v in reference.state_dict().items()}
    losses = dpo.train_dpo(policy, reference, chosen, rejected, 2, beta=0.5, steps=20, lr=1e-2,
                           batch_size=8)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5) and losses[-1] < 0.3
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in ref_state.items())
    vocab = ["a", "e", "b", "c", "d"]
    rate, kl = dpo.property_rate_and_kl(reference, reference, chosen[:4, :2], 3, vocab, 0)
    assert kl == pytest.approx(0.0, abs=1e-6) and 0.0 <= rate <= 1.0
