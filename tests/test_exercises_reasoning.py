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


def test_the_format_reward_answer_matches_the_shipped_run() -> None:
    """Exercise 4's answer is what scripts/train_reasoning.py measured (the format-only run)."""
    runs = reasoning.load_results("rl")["runs"]
    run, correct = runs["format/0"], runs["correct/0"]
    before, after = run["before"]["pass1"], run["after"]["pass1"]
    letter = answer("reasoning.format_reward_prediction")  # the source notebook's hidden test
    if letter == "b":
        assert abs(after - before) < 0.05
    elif letter == "c":
        assert after < before / 2
    else:
        assert after - before > 0.5 * (correct["after"]["pass1"] - correct["before"]["pass1"])


def test_the_pass_at_k_answer_matches_the_shipped_runs() -> None:
    """Exercise 9's answer is what every correctness run measured: (c) pass@32 falls by several
    points, (b) stays within one point, (a) rises by more than one."""
    runs = reasoning.load_results("rl")["runs"]
    letter = answer("reasoning.pass_at_k_prediction")
    for name in ("correct/0", "correct/1"):
        change = runs[name]["after"]["pass_at_k"]["32"] - runs[name]["before"]["pass_at_k"]["32"]
        assert {"a": change > 0.01, "b": abs(change) <= 0.01, "c": change < -0.03}[letter], name


def test_plug_in_bias_against_exact_fractions_and_sampling() -> None:
    """The reference (moments in k + 1 terms) against a direct sum in exact rational arithmetic;
    the unbiased estimator's expectation is exactly the true pass@k, the plug-in's falls short
    (Jensen)."""
    for p, n, k in [(Fraction(1, 3), 7, 3), (Fraction(1, 10), 30, 12), (Fraction(7, 8), 12, 12)]:
        weights = [math.comb(n, c) * p ** c * (1 - p) ** (n - c) for c in range(n + 1)]
        plug = sum(w * (1 - (1 - Fraction(c, n)) ** k) for c, w in enumerate(weights))
        exact = plug - (1 - (1 - p) ** k)
        got = reasoning.plug_in_bias(torch.tensor([float(p)], dtype=torch.float64), n, k).item()
        assert got == pytest.approx(float(exact), rel=1e-10, abs=1e-14)
        assert got < 0
        unbiased = sum(w * (1 - Fraction(math.comb(n - c, k), math.comb(n, k)))
                       for c, w in enumerate(weights))
        assert unbiased == 1 - (1 - p) ** k
    torch.manual_seed(0)
    p, n, k = 0.2, 16, 8
    c = torch.distributions.Binomial(n, torch.full((200_000,), p)).sample()
    simulated = (1 - (1 - c / n) ** k).mean().item() - (1 - (1 - p) ** k)
    assert simulated == pytest.approx(
        reasoning.plug_in_bias(torch.tensor([p], dtype=torch.float64), n, k).item(), abs=3e-3)


def test_plug_in_bias_at_a_billion_samples_is_exact() -> None:
    """At n = 10^9 (the hidden case no sum over the counts reaches) the reference agrees with the
    expansion in 1/n, -k (k - 1) / (2 n) (1 - p)^(k - 1) p, to its O(1/n^2) remainder."""
    p = torch.tensor([0.001, 0.05, 0.2], dtype=torch.float64)
    n, k = 10**9, 30
    got = reasoning.plug_in_bias(p, n, k)
    first_order = -k * (k - 1) / (2 * n) * (1 - p) ** (k - 1) * p
    assert torch.allclose(got, first_order, rtol=1e-6, atol=0.0)


def test_kl_gradients_against_autograd_and_sampled_k3() -> None:
    """exact is autograd's gradient of the KL; k3 is autograd's gradient of k3 at each token,
    weighted by the (detached) sampling probabilities, and that of KL(pi_ref || pi)."""
    g = torch.Generator().manual_seed(3)
    z = torch.randn(4, 6, generator=g, dtype=torch.float64).requires_grad_()
    z_ref = torch.randn(4, 6, generator=g, dtype=torch.float64)
    logp, logq = z.log_softmax(-1), z_ref.log_softmax(-1)
    (kl_grad,) = torch.autograd.grad((logp.exp() * (logp - logq)).sum(), z, retain_graph=True)
    d = logq - logp
    (k3_grad,) = torch.autograd.grad((logp.exp().detach() * (d.exp() - d - 1)).sum(), z,
                                     retain_graph=True)
    (rev_grad,) = torch.autograd.grad((logq.exp() * (logq - logp)).sum(), z)
    exact, k3 = rl.kl_gradients(z.detach(), z_ref)
    torch.testing.assert_close(exact, kl_grad)
    torch.testing.assert_close(k3, k3_grad)
    torch.testing.assert_close(k3, rev_grad)
    assert (exact - k3).abs().max() > 1e-2  # not the KL's gradient


def test_grpo_loss_gradient_off_policy_with_kl() -> None:
    """At ratio != 1 and beta > 0, the gradient of each token is -A rho where unclipped
    (0 where clipped) plus beta (1 - pi_ref / pi), over sum(m): graded through loss_and_grad."""
    from course_lib.exercises._calls import loss_and_grad

    g = torch.Generator().manual_seed(5)
    old = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 2
    logp = old + 0.3 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    ref = old + 0.5 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    out = loss_and_grad(rl.grpo_loss, {"logp": logp, "logp_old": old, "logp_ref": ref,
                                       "advantages": adv, "mask": mask, "clip_eps": 0.2,
                                       "beta": 0.3})
    rho, a = (logp - old).exp(), adv[:, None]
    active = torch.where(a > 0, rho < 1.2, rho > 0.8)
    expected = (-a * rho * active + 0.3 * (1 - (ref - logp).exp())) * mask / mask.sum()
    torch.testing.assert_close(out["grad"], expected)
