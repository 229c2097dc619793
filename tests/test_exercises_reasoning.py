"""Chapter 9's exercises: the references agree with independent peers (first principles), and
the question's answer is what the shipped run measured.

That the instructor's solutions pass and the slips fail with their own messages is checked for
every chapter in tests/test_exercises.py and tests/test_exercise_registries.py."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from course_lib import reasoning, rl
from tests.questions import answer

pytestmark = pytest.mark.ch09


def test_pass_at_k_equals_exact_binomials() -> None:
    """The product form against exact rational arithmetic on the binomials themselves."""
    for n, k in [(10, 3), (200, 17), (2000, 1000)]:
        c = torch.tensor([0, 1, n // 3, n - k, n - k + 1, n])
        got = reasoning.pass_at_k(n, c, k)
        exact = [1 - Fraction(math.comb(n - ci, k), math.comb(n, k)) for ci in c.tolist()]
        assert got.tolist() == pytest.approx([float(e) for e in exact], rel=1e-12, abs=1e-15)


def test_pass_at_k_is_the_probability_over_draws_without_replacement() -> None:
    """Enumerate every choice of k samples of n = 6 (c = 2 right): the share holding a right one."""
    from itertools import combinations

    right = {0, 1}
    for k in range(1, 7):
        choices = list(combinations(range(6), k))
        share = sum(bool(right & set(ch)) for ch in choices) / len(choices)
        assert reasoning.pass_at_k(6, torch.tensor([2]), k).item() == pytest.approx(share)


def test_majority_vote_agrees_with_counter_on_untied_votes() -> None:
    from collections import Counter

    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        votes = torch.randint(0, 5, (7,), generator=g).tolist()
        counts = Counter(votes).most_common()
        if len(counts) > 1 and counts[0][1] == counts[1][1]:
            continue
        assert reasoning.majority_vote(votes) == counts[0][0]


def test_advantages_from_first_principles() -> None:
    g = torch.Generator().manual_seed(0)
    r = torch.rand(5, 6, generator=g, dtype=torch.float64)
    r[2] = 0.5
    loo = torch.stack([torch.stack([r[p, i] - torch.cat([r[p, :i], r[p, i + 1:]]).mean()
                                    for i in range(6)]) for p in range(5)])
    torch.testing.assert_close(rl.rloo_advantages(r), loo)
    a = rl.group_advantages(r)
    assert torch.equal(a[2], torch.zeros(6, dtype=torch.float64))
    for p in (0, 1, 3, 4):
        mean = sum(r[p].tolist()) / 6
        sd = math.sqrt(sum((v - mean) ** 2 for v in r[p].tolist()) / 5)
        assert a[p].tolist() == pytest.approx([(v - mean) / sd for v in r[p].tolist()])
    # GRPO's advantage is RLOO's rescaled: A_grpo = (G - 1) / G * A_rloo / std
    torch.testing.assert_close(a[0], (5 / 6) * rl.rloo_advantages(r)[0] / r[0].std())


def test_grpo_gradient_is_reinforce_at_ratio_one_and_zero_where_clipped() -> None:
    g = torch.Generator().manual_seed(2)
    logp = (-torch.rand(4, 5, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([1.0, -2.0, 0.5, -0.1], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]],
                        dtype=torch.bool)
    (grad,) = torch.autograd.grad(rl.grpo_loss(logp, logp.detach(), logp.detach() - 0.3, adv,
                                               mask, beta=0.0), logp)
    torch.testing.assert_close(grad, -adv[:, None] * mask / mask.sum())
    # ratio 2 (beyond 1 + eps): a positive advantage is clipped (no gradient), a negative is not
    old = logp.detach() - math.log(2.0)
    (grad,) = torch.autograd.grad(rl.grpo_loss(logp, old, logp.detach(), adv, mask, beta=0.0),
                                  logp)
    assert torch.all(grad[adv > 0] == 0)
    torch.testing.assert_close(grad[adv < 0], (-2.0 * adv[:, None] * mask / mask.sum())[adv < 0])


def test_sequence_level_averages_each_response_first() -> None:
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0])
    assert rl.grpo_loss(lp, lp, lp, adv, mask).item() == pytest.approx((-1 + 4) / 5)
    assert rl.grpo_loss(lp, lp, lp, adv, mask, level="sequence").item() == pytest.approx(0.0)


def test_k3_is_unbiased_for_the_kl() -> None:
    """Sampled from p, the mean of k3 approaches KL(p || q)."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    draws = torch.multinomial(p, 200_000, replacement=True, generator=g)
    estimate = rl.k3_kl(p.log()[draws], q.log()[draws]).mean().item()
    assert estimate == pytest.approx(float((p * (p / q).log()).sum()), rel=0.02)


def test_the_hacking_answer_matches_the_shipped_run() -> None:
    """Exercise 6's answer is what scripts/train_reasoning.py measured (the format-only run)."""
    run = reasoning.load_results("rl")["runs"]["format/0"]
    before, after = run["before"]["pass1"], run["after"]["pass1"]
    correct = reasoning.load_results("rl")["runs"]["correct/0"]
    letter = answer("reasoning.hacking_prediction")  # the source notebook's hidden test
    if letter == "b":
        assert abs(after - before) < 0.05
    elif letter == "c":
        assert after < before / 2
    else:
        assert after - before > 0.5 * (correct["after"]["pass1"] - correct["before"]["pass1"])
