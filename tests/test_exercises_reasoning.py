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


def test_the_verifier_answer_matches_the_shipped_runs() -> None:
    """Exercise 4's answer is what scripts/train_reasoning.py --part hacking measured: on how many
    seeds more than half of the held-out completions have no answer after the run: (a) every
    seed, (b) some and not others, (c) none."""
    runs = list(rl.load_runs("hacking")["runs"].values())
    last = str(max(int(s) for s in runs[0]["evals"]))
    found = sum(r["evals"][last]["no_answer"] > 0.5 for r in runs)
    letter = answer("reasoning.verifier_prediction")  # the source notebook's hidden test
    assert {"a": found == len(runs), "b": 0 < found < len(runs), "c": found == 0}[letter]


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


def test_group_size_against_exact_fractions_and_sampling() -> None:
    """Exercise 6's reference: the chance that a group of G has all advantages 0 is
    mean_i p_i^G + (1 - p_i)^G (exact fractions), and a simulation of groups agrees with it;
    the size returned is the first to meet the bound."""
    from course_lib.exercises.reasoning import group_size

    rates = [Fraction(1, 10), Fraction(1, 2), Fraction(9, 10)]
    for bound in (0.5, 0.2, 0.05):
        g = group_size(torch.tensor([float(p) for p in rates], dtype=torch.float64), bound)

        def waste(size: int) -> Fraction:
            return sum(p ** size + (1 - p) ** size for p in rates) / len(rates)

        assert waste(g) <= bound and (g == 2 or waste(g - 1) > bound)
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    which = torch.randint(0, 3, (200_000,), generator=gen)
    rewards = torch.rand(200_000, 6, generator=gen, dtype=torch.float64) < p[which, None]
    equal = (rewards.all(1) | (~rewards).all(1)).double().mean().item()
    assert equal == pytest.approx(float((p ** 6 + (1 - p) ** 6).mean()), abs=3e-3)


def test_kl_loss_has_the_kls_expected_gradient_and_k3_does_not() -> None:
    """Exercise 9's reference (k2 as a loss): its gradient at each token, weighted by the detached
    sampling probabilities, is autograd's gradient of KL(pi || pi_ref); k3's is not; the trusted
    postprocessing of the grader computes the same expected gradient from a shuffled layout."""
    import numpy as np

    from course_lib.exercises._calls import token_loss_grad
    from course_lib.exercises.reasoning import EXERCISES, kl_expected_gradient, kl_loss

    g = torch.Generator().manual_seed(4)
    z = torch.randn(3, 7, generator=g, dtype=torch.float64).requires_grad_()
    z_ref = torch.randn(3, 7, generator=g, dtype=torch.float64)
    logp, logq = z.log_softmax(-1), z_ref.log_softmax(-1)
    (kl_grad,) = torch.autograd.grad((logp.exp() * (logp - logq)).sum(), z, retain_graph=True)
    for loss, right in ((kl_loss, True), (rl.k3_kl, False)):
        (got,) = torch.autograd.grad((logp.exp().detach() * loss(logp, logq)).sum(), z,
                                     retain_graph=True)
        assert torch.allclose(got, kl_grad) is right
    for case in EXERCISES["reasoning.kl_loss"].cases():
        inputs = case.inputs()
        out = {"grad": token_loss_grad(kl_loss, inputs)["grad"].numpy()}
        expected = kl_expected_gradient(inputs, out)
        rows, vocab = inputs["shape"]
        flat = torch.empty(rows * vocab, dtype=torch.float64)
        flat[inputs["index"]] = inputs["logp"].double()
        ref = torch.empty(rows * vocab, dtype=torch.float64)
        ref[inputs["index"]] = inputs["logp_ref"].double()
        lp, lq = flat.reshape(rows, vocab), ref.reshape(rows, vocab)
        pi = lp.exp()
        assert torch.allclose(pi.sum(-1), torch.ones(rows, dtype=torch.float64), atol=1e-5)
        truth = pi * (lp - lq - (pi * (lp - lq)).sum(-1, keepdim=True))
        assert np.allclose(expected, truth.numpy(), atol=1e-5)
        # a derivative off by a constant, (log-ratio + 1) * logp with the log-ratio detached,
        # has the same expected gradient (sum_y pi_y (e_y - pi) = 0 in each distribution)
        shifted = {"grad": token_loss_grad(
            lambda logp, logp_ref: ((logp - logp_ref).detach() + 1) * logp, inputs)["grad"].numpy()}
        assert np.allclose(kl_expected_gradient(inputs, shifted), expected, atol=1e-5)


def test_response_logprobs_agrees_with_the_trainers_token_logprobs() -> None:
    """Exercise 10's reference, from logits = model(tokens), against rl.token_logprobs (which runs
    the model on tokens[:, :-1]), on a small GPT."""
    from course_lib import gpt
    from course_lib.exercises.reasoning import response_logprobs

    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=16))
    model.eval()
    tokens = torch.randint(0, 11, (3, 9))
    with torch.no_grad():
        got = response_logprobs(model(tokens), tokens, 4)
        torch.testing.assert_close(got, rl.token_logprobs(model, tokens, 4))


def test_the_std_ablation_answer_matches_the_shipped_runs() -> None:
    """Exercise 12's answer is what the shipped ablations measured: the KL to the reference over
    the last ten steps, mean over the seeds, of "no std" against GRPO's; (c) more than 20%
    smaller, (b) within 20%, (a) more than 20% larger. Every seed agrees with the letter."""
    runs = reasoning.load_results("ablations")["runs"]
    seeds = sorted({r["seed"] for r in runs.values()})

    def kl(name: str, seed: int) -> float:
        return sum(runs[f"{name}/{seed}"]["history"]["kl"][-10:]) / 10

    letter = answer("reasoning.std_ablation_prediction")
    ratios = [kl("no std", s) / kl("GRPO", s) for s in seeds]  # 0.63, 0.53 when written
    mean = (sum(kl("no std", s) for s in seeds) / sum(kl("GRPO", s) for s in seeds))
    for ratio in ratios + [mean]:
        assert {"a": ratio > 1.2, "b": 0.8 <= ratio <= 1.2, "c": ratio < 0.8}[letter]
