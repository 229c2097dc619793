"""Graded exercises of chapter 9, "Reasoning": references, cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the majority
vote, pass@k and the plug-in estimate's bias (:mod:`course_lib.reasoning`), the advantages, the
GRPO loss, the KL gradients and the response's log-probabilities (:mod:`course_lib.rl`). Three
references live here, not in the library: :func:`group_size`, :func:`kl_loss` and
:func:`response_logprobs` (whose given, buggy version the notebook shows).

``kl_loss`` is graded on what its gradient means: the call adapter
(:func:`course_lib.exercises._calls.token_loss_grad`) returns the gradient of the student's
per-token losses with respect to ``logp``, and :func:`kl_expected_gradient` (on the trusted side)
turns it into the expected gradient with respect to the logits, which every loss whose derivative
is ``log pi - log pi_ref`` plus a constant shares with the reference.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import torch

from course_lib import reasoning, rl
from course_lib.exercises._calls import each_call, loss_and_grad, token_loss_grad
from course_lib.exercises._common import f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

# 1. majority_vote -------------------------------------------------------------------------------


def _drawn_votes(seed: int, rows: int, with_none: bool) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        calls = []
        for r in range(rows):
            n = pick(seed + 2 * r, 1, 9)
            values = torch.randint(0, 4, (n,), generator=gen(seed + 2 * r + 1)).tolist()
            calls.append({"answers": [None if (with_none and v == 0) else v for v in values]})
        return {"calls": calls}
    return build


def _majority_cases() -> list[Case]:
    return [
        Case("a clear majority", lambda: {"calls": [{"answers": [3, 5, 5]},
                                                     {"answers": [1, 1, 1, 2]}]}),
        Case("ties", lambda: {"calls": [{"answers": [4, 2, 2, 4]}, {"answers": [7, 1]},
                                        {"answers": [9, 0, 0, 9, 5]}]}),
        Case("completions without an answer", lambda: {"calls": [
            {"answers": [None, None, 6]}, {"answers": [None, 2, None, 3, 3]},
            {"answers": [None]}, {"answers": [None, None]}]}),
        Case("votes drawn for this grading run", _drawn_votes(300, 8, with_none=False)),
        Case("votes with missing answers drawn for this grading run",
             _drawn_votes(340, 8, with_none=True)),
    ]


def _vote_none_counts(answers: Sequence[int | None]) -> int | None:
    return Counter(answers).most_common(1)[0][0]


def _vote_smallest(answers: Sequence[int | None]) -> int | None:
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return min(a for a, n in counts.items() if n == best)


def _vote_last(answers: Sequence[int | None]) -> int | None:
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return [a for a in answers if a is not None and counts[a] == best][-1]


def _vote_zero(answers: Sequence[int | None]) -> int | None:
    counts = Counter(a for a in answers if a is not None)
    return counts.most_common(1)[0][0] if counts else 0


_MAJORITY_SLIPS = (
    Slip("a completion without an answer (None) does not vote", _vote_none_counts),
    Slip("a tie goes to the answer that appears first in the list, not the smallest",
         _vote_smallest),
    Slip("a tie goes to the answer that appears first in the list, not the last", _vote_last),
    Slip("with no answer at all, return None, not 0", _vote_zero),
)


# 2. pass_at_k -----------------------------------------------------------------------------------


def _pass_cases() -> list[Case]:
    def build(seed: int, n: int, k: int, P: int) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            c = torch.randint(0, n + 1, (P,), generator=gen(seed))
            c[0], c[-1] = 0, n  # never right, always right
            return {"n": n, "c": c, "k": k}
        return inputs

    def drawn() -> dict[str, Any]:
        n = pick(420, 50, 400)
        k = pick(421, 2, n // 3)
        c = torch.randint(0, n + 1, (12,), generator=gen(422))
        c[1] = n - k + 1  # fewer than k wrong samples
        c[2] = n - k  # exactly k wrong samples
        return {"n": n, "c": c, "k": k}

    return [
        Case("k = 1", build(400, 20, 1, 6)),
        Case("small n, k = 3", build(401, 10, 3, 8)),
        Case("fewer wrong samples than k", lambda: {"n": 8, "c": torch.tensor([3, 4, 5, 6, 7]),
                                                    "k": 5}),
        Case("one problem, k = n", lambda: {"n": 7, "c": torch.tensor([2]), "k": 7}),
        Case("n = 2,000 and k = 1,000 (no overflow)", build(402, 2000, 1000, 9)),
        Case("n = 10,000, large k", build(403, 10000, 2500, 5)),
        Case("n and k drawn for this grading run", drawn),
    ]


def _pass_biased(n: int, c: torch.Tensor, k: int) -> torch.Tensor:
    return 1 - (1 - c.to(torch.float64) / n) ** k


def _pass_union(n: int, c: torch.Tensor, k: int) -> torch.Tensor:
    return (k * c.to(torch.float64) / n).clamp(max=1.0)


def _pass_mean(n: int, c: torch.Tensor, k: int) -> torch.Tensor:
    return c.to(torch.float64) / n


def _pass_off_by_one(n: int, c: torch.Tensor, k: int) -> torch.Tensor:
    out = []
    for ci in c.tolist():
        prod = 1.0
        for i in range(n - ci, n):
            prod *= 1 - k / i if i > 0 else 0.0
        out.append(1 - prod)
    return torch.tensor(out, dtype=torch.float64)


_PASS_SLIPS = (
    Slip("1 - (1 - c/n)^k draws the k samples with replacement: it is biased low; choose k of "
         "the n samples without replacement", _pass_biased),
    Slip("k c / n is a bound (the union bound), not the probability", _pass_union),
    Slip("c / n is pass@1 only: k samples pass when any one of them is right", _pass_mean),
    Slip("the product runs over i = n - c + 1, ..., n (c factors), one further along",
         _pass_off_by_one),
)


# 3. plug_in_bias -------------------------------------------------------------------------------


def _bias_cases() -> list[Case]:
    def build(seed: int, P: int, n: int, k: int) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            p = torch.rand(P, generator=gen(seed), dtype=f64)
            p[0] = 0.0  # never solved
            if P > 2:
                p[1] = 1.0  # always solved
            return {"p": p, "n": n, "k": k}
        return inputs

    def drawn() -> dict[str, Any]:
        n = pick(720, 3, 300)
        return build(721, 7, n, pick(722, 2, n))()

    def huge() -> dict[str, Any]:
        p = 0.001 + 0.2 * torch.rand(6, generator=gen(723), dtype=f64)  # biases well above 0
        return {"p": p, "n": 10**9, "k": pick(724, 10, 30)}

    return [
        Case("k = 1", build(700, 5, 12, 1)),
        Case("small n and k", build(701, 6, 5, 3)),
        Case("k = n", build(702, 4, 9, 9)),
        Case("one problem", lambda: {"p": torch.tensor([0.3], dtype=f64), "n": 20, "k": 4}),
        Case("float32 probabilities", lambda: {"p": torch.rand(5, generator=gen(704)),
                                               "n": 40, "k": 6}),
        Case("n = 2,000 (binomial coefficients beyond float64)", build(703, 6, 2000, 50)),
        Case("n and k drawn for this grading run", drawn),
        # No sum over the n + 1 counts fits the grader's memory and minute here, and the bias
        # (about 1e-9) is compared relatively: the exact expectation, or its expansion in 1/n.
        Case("n = 10^9, compared to a relative 1e-7", huge, rtol=1e-7, atol=0.0),
    ]


def _plug_in_expectation(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """E[1 - (1 - c/n)^k] over c ~ Binomial(n, p), exactly (a slip's helper; never a reference):
    with m = n - c ~ Binomial(n, q), E[m^k] = sum_j S(k, j) n (n - 1) ... (n - j + 1) q^j."""
    stirling = [1]
    for i in range(1, k + 1):
        stirling = [0] + [j * (stirling[j] if j < i else 0) + stirling[j - 1]
                          for j in range(1, i + 1)]
    falling = [1]
    for j in range(k):
        falling.append(falling[-1] * (n - j))
    out = []
    for value in p.to(f64).flatten().tolist():
        q = 1 - Fraction(value)
        a, b = q.numerator, q.denominator
        moment = sum(stirling[j] * falling[j] * a ** j * b ** (k - j) for j in range(k + 1))
        out.append(float(1 - Fraction(moment, b ** k * n ** k)))
    return torch.tensor(out, dtype=f64).reshape(p.shape)


def _bias_zero(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return torch.zeros_like(p, dtype=f64)


def _bias_flipped(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return 1 - (1 - p.to(f64)) ** k - _plug_in_expectation(p, n, k)


def _bias_expectation(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return _plug_in_expectation(p, n, k)


def _bias_true_value(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return 1 - (1 - p.to(f64)) ** k


_BIAS_SLIPS = (
    Slip("0 says the plug-in estimate is unbiased: average it over the counts c that n samples "
         "can give, each with its probability", _bias_zero),
    Slip("the bias is the estimate's expectation minus the true pass@k, not the other way round",
         _bias_flipped),
    Slip("that is the estimate's expectation: subtract the true pass@k, 1 - (1 - p)^k",
         _bias_expectation),
    Slip("that is the true pass@k: return the plug-in estimate's expectation minus it",
         _bias_true_value),
)


# 4. verifier_prediction ------------------------------------------------------------------------


_VERIFIER_PREDICTION = Question(
    id="reasoning.verifier_prediction", choices="abc",
    hint=("a completion without an answer is paid only once it is drawn: at the starting rate, "
          "how many does a run draw, does the rate stay put while the policy learns from the "
          "right answers, and what decides when the first few come?"))


# 5. group_advantages ----------------------------------------------------------------------------


def _adv_cases() -> list[Case]:
    def binary(seed: int, P: int, G: int, dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            r = (torch.rand(P, G, generator=gen(seed)) < 0.5).to(dtype)
            r[0] = 1.0  # a group all right
            if P > 2:
                r[1] = 0.0  # a group all wrong
                r[2, 0], r[2, 1:] = 1.0, 0.0  # one right
            return {"rewards": r}
        return inputs

    def graded(seed: int, P: int, G: int, dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            r = torch.rand(P, G, generator=gen(seed), dtype=dtype)
            r[-1] = 0.25  # equal rewards that are not 0 or 1
            return {"rewards": r}
        return inputs

    return [
        Case("float32, right/wrong rewards, groups of 8", binary(500, 6, 8)),
        Case("float64, right/wrong rewards, groups of 4", binary(510, 5, 4, f64)),
        Case("float32, graded rewards in [0, 1]", graded(520, 4, 6)),
        Case("float64, batch size 1 (one group of 2)",
             lambda: {"rewards": torch.tensor([[0.0, 1.0]], dtype=f64)}),
        Case("float64, sizes drawn for this grading run",
             lambda: {"rewards": randn(530, pick(531, 2, 7), pick(532, 2, 16), dtype=f64)}),
    ]


def _adv_population(rewards: torch.Tensor) -> torch.Tensor:
    c = rewards - rewards.mean(1, keepdim=True)
    s = rewards.std(1, unbiased=False, keepdim=True)
    return torch.where(s > 0, c / torch.where(s > 0, s, 1.0), 0.0)


def _adv_centred(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(1, keepdim=True)


def _adv_global(rewards: torch.Tensor) -> torch.Tensor:
    s = rewards.std()
    return (rewards - rewards.mean()) / s if s > 0 else rewards * 0


def _adv_nan(rewards: torch.Tensor) -> torch.Tensor:
    return (rewards - rewards.mean(1, keepdim=True)) / rewards.std(1, keepdim=True)


def _adv_raw(rewards: torch.Tensor) -> torch.Tensor:
    return rewards / rewards.std(1, keepdim=True).clamp(min=1e-12)


_ADV_SLIPS = (
    Slip("use the sample standard deviation of each group (divide by G - 1, torch.std's "
         "default)", _adv_population),
    Slip("divide the centred rewards by their group's standard deviation", _adv_centred),
    Slip("each group has its own mean and standard deviation (dim=1), not the whole batch's",
         _adv_global),
    Slip("a group whose rewards are all equal has standard deviation 0: its advantages are 0, "
         "not 0/0 = NaN", _adv_nan),
    Slip("subtract the group's mean reward first", _adv_raw),
)


def _adv_diagnose(inputs: Any, got: Any, expected: Any) -> str | None:
    import numpy as np

    if isinstance(got, np.ndarray) and np.isnan(got).any():
        return ("NaN in your advantages: a group whose rewards are all equal has standard "
                "deviation 0, and its advantages are 0")
    return None


# 6. group_size ----------------------------------------------------------------------------------


def group_size(pass_rates: torch.Tensor, bound: float) -> int:
    """The smallest group size ``G >= 2`` whose expected share of equal-reward groups is at most
    ``bound`` (the reference of exercise 6).

    With 0/1 rewards and each sample of problem ``i`` right independently with probability
    ``p_i``, a group of ``G`` teaches nothing when its samples are all right or all wrong, with
    probability ``p_i^G + (1 - p_i)^G``; averaged over the problems, this falls with ``G``.

    Example:
        >>> group_size(torch.tensor([0.5]), 0.1)  # 2 * 0.5^G <= 0.1 from G = 5
        5
    """
    p = [float(v) for v in pass_rates.to(f64).flatten().tolist()]
    g = 2
    while sum(v ** g + (1 - v) ** g for v in p) / len(p) > bound:
        g += 1
    return g


def _wasted(p: Sequence[float], g: int) -> float:
    return sum(v ** g + (1 - v) ** g for v in p) / len(p)


def _size_cases() -> list[Case]:
    def near(seed: int, P: int, low: float, high: float, side: str,
             ) -> Callable[[], dict[str, Any]]:
        """A bound just above the waste at some G (answer G) or just below it (answer G + 1):
        a simulation cannot tell them apart."""
        def inputs() -> dict[str, Any]:
            p = low + (high - low) * torch.rand(P, generator=gen(seed), dtype=f64)
            g = pick(seed + 1, 3, 12)
            w = _wasted(p.tolist(), g)
            return {"pass_rates": p, "bound": w * (1 + 1e-9) if side == "above" else w * (1 - 1e-9)}
        return inputs

    return [
        Case("one problem, p = 1/2", lambda: {"pass_rates": torch.tensor([0.5], dtype=f64),
                                              "bound": 0.1}),
        Case("float32 pass rates, a loose bound",
             lambda: {"pass_rates": 0.1 + 0.8 * torch.rand(6, generator=gen(900)), "bound": 0.3}),
        Case("pass rates that differ widely (the mean pass rate is not enough)",
             lambda: {"pass_rates": torch.tensor([0.02, 0.05, 0.5, 0.9, 0.97], dtype=f64),
                      "bound": 0.2}),
        Case("rarely solved problems, a tight bound",
             lambda: {"pass_rates": 0.01 + 0.04 * torch.rand(4, generator=gen(901), dtype=f64),
                      "bound": 0.05}),
        Case("a bound a hair above the waste of some G", near(910, 7, 0.05, 0.95, "above")),
        Case("a bound a hair below the waste of some G", near(920, 5, 0.2, 0.99, "below")),
        Case("pass rates drawn for this grading run", near(930, pick(931, 2, 9), 0.01, 0.99,
                                                          "above")),
    ]


def _smallest(p: Sequence[float], bound: float) -> int:
    g = 2
    while _wasted(p, g) > bound:
        g += 1
    return g


def _size_mean_rate(pass_rates: torch.Tensor, bound: float) -> int:
    return _smallest([float(pass_rates.to(f64).mean())], bound)


def _size_all_wrong_only(pass_rates: torch.Tensor, bound: float) -> int:
    p = pass_rates.to(f64).tolist()
    g = 2
    while sum((1 - v) ** g for v in p) / len(p) > bound:
        g += 1
    return g


def _size_all_right_only(pass_rates: torch.Tensor, bound: float) -> int:
    p = pass_rates.to(f64).tolist()
    g = 2
    while sum(v ** g for v in p) / len(p) > bound:
        g += 1
    return g


def _size_one_short(pass_rates: torch.Tensor, bound: float) -> int:
    return _smallest(pass_rates.to(f64).tolist(), bound) - 1


_SIZE_SLIPS = (
    Slip("the chance of a wasted group is not a function of the mean pass rate: average each "
         "problem's own probability over the problems (the function is convex in p, so the mean "
         "pass rate underestimates the waste)", _size_mean_rate),
    Slip("a group teaches nothing when its rewards are all equal: all wrong, or all right",
         _size_all_wrong_only),
    Slip("a group teaches nothing when its rewards are all equal: all right, or all wrong",
         _size_all_right_only),
    Slip("one short: the size you return must itself meet the bound (at most `bound`)",
         _size_one_short),
)


# 7. rloo_advantages -----------------------------------------------------------------------------


def _rloo_centred(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(1, keepdim=True)


def _rloo_over_g(rewards: torch.Tensor) -> torch.Tensor:
    g = rewards.shape[1]
    return rewards - (rewards.sum(1, keepdim=True) - rewards) / g


def _rloo_normalised(rewards: torch.Tensor) -> torch.Tensor:
    c = rewards - rewards.mean(1, keepdim=True)
    s = rewards.std(1, keepdim=True)
    return torch.where(s > 0, c / torch.where(s > 0, s, 1.0), 0.0)


def _rloo_swapped(rewards: torch.Tensor) -> torch.Tensor:
    g = rewards.shape[1]
    return (rewards.sum(1, keepdim=True) - rewards) / (g - 1) - rewards


_RLOO_SLIPS = (
    Slip("leave sample i out of its own baseline: the mean of the other G - 1 rewards",
         _rloo_centred),
    Slip("the other rewards are G - 1, so their mean divides by G - 1, not G", _rloo_over_g),
    Slip("REINFORCE leave-one-out does not divide by the standard deviation",
         _rloo_normalised),
    Slip("the advantage is the reward minus the baseline, not the other way round",
         _rloo_swapped),
)


# 8. grpo_loss -----------------------------------------------------------------------------------


def _grpo_cases() -> list[Case]:
    def build(seed: int, B: int, N: int, clip_eps: float, beta: float, dtype: torch.dtype = f32,
              spread: float = 0.3) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            logp_old = -torch.rand(B, N, generator=gen(seed), dtype=dtype) * 3
            lengths = torch.randint(1, N + 1, (B,), generator=gen(seed + 1))
            lengths[0] = N
            mask = torch.arange(N)[None, :] < lengths[:, None]
            return {"logp": logp_old + randn(seed + 2, B, N, dtype=dtype, scale=spread),
                    "logp_old": logp_old,
                    "logp_ref": logp_old + randn(seed + 3, B, N, dtype=dtype, scale=0.5),
                    "advantages": randn(seed + 4, B, dtype=dtype),
                    "mask": mask, "clip_eps": clip_eps, "beta": beta}
        return inputs

    return [
        Case("float32, ratios inside and outside the clip range", build(600, 6, 9, 0.2, 0.04)),
        Case("float64, a large KL weight", build(610, 5, 7, 0.2, 0.5, f64)),
        Case("float64, ratios far from 1 and a KL weight", build(615, 6, 8, 0.2, 0.3, f64,
                                                                 spread=0.8)),
        Case("float64, no KL (beta = 0), wide ratios", build(620, 8, 6, 0.1, 0.0, f64,
                                                            spread=0.6)),
        Case("float32, batch size 1", build(630, 1, 11, 0.3, 0.1)),
        Case("float64, on-policy (ratio 1)", lambda: {**build(640, 4, 5, 0.2, 0.1, f64)(),
                                                      "logp": build(640, 4, 5, 0.2, 0.1,
                                                                    f64)()["logp_old"]}),
        Case("float64, sizes drawn for this grading run",
             build(650, pick(651, 2, 9), pick(652, 2, 12), 0.2, 0.05, f64)),
    ]


def _ratio(logp: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    return (logp - logp_old).exp()


def _k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    d = logp_ref - logp
    return d.exp() - d - 1


def _token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(per_token.dtype)
    return (per_token * m).sum() / m.sum()


def _grpo_no_min(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                 advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                 beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    return _token_mean(-r.clamp(1 - clip_eps, 1 + clip_eps) * a + beta * _k3(logp, logp_ref),
                       mask)


def _grpo_no_clip(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                  advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                  beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    return _token_mean(-r * a + beta * _k3(logp, logp_ref), mask)


def _grpo_max(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
              beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.maximum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return _token_mean(-s + beta * _k3(logp, logp_ref), mask)


def _grpo_k1(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
             advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
             beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return _token_mean(-s + beta * (logp - logp_ref), mask)


def _grpo_kl_sign(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                  advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                  beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return _token_mean(-s - beta * _k3(logp, logp_ref), mask)


def _grpo_kl_detached(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                      advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                      beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return _token_mean(-s + beta * _k3(logp.detach(), logp_ref), mask)


def _grpo_sequence(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                   advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                   beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    per_token = -s + beta * _k3(logp, logp_ref)
    m = mask.to(per_token.dtype)
    return ((per_token * m).sum(1) / m.sum(1)).mean()


def _grpo_unmasked(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                   advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                   beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return (-s + beta * _k3(logp, logp_ref)).mean()


def _grpo_maximised(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                    advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
                    beta: float) -> torch.Tensor:
    r, a = _ratio(logp, logp_old), advantages[:, None]
    s = torch.minimum(r * a, r.clamp(1 - clip_eps, 1 + clip_eps) * a)
    return _token_mean(s - beta * _k3(logp, logp_ref), mask)


_GRPO_SLIPS = (
    Slip("the loss is minimised: it is minus the clipped objective (plus the KL term)",
         _grpo_maximised),
    Slip("take the minimum of the unclipped and the clipped term: clipping alone lets a "
         "negative advantage's ratio run off", _grpo_no_min),
    Slip("clip the ratio to [1 - clip_eps, 1 + clip_eps] in the second term", _grpo_no_clip),
    Slip("the pessimistic bound is the minimum of the two terms, not the maximum", _grpo_max),
    Slip("the KL term is the k3 estimator exp(ref - logp) - (ref - logp) - 1, not logp - ref",
         _grpo_k1),
    Slip("the KL penalty is added to the loss (beta * k3), not subtracted", _grpo_kl_sign),
    Slip("the KL term has the right value but no gradient: it must be computed from logp "
         "without detaching it, or the penalty never acts on the policy", _grpo_kl_detached),
    Slip("average over every response token of the batch (mask.sum()), not per sequence first",
         _grpo_sequence),
    Slip("tokens after a response's end (mask False) count for nothing", _grpo_unmasked),
)


# 9. kl_loss -------------------------------------------------------------------------------------


def kl_loss(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    r"""A per-token loss whose expected gradient is that of KL(pi || pi_ref) (the reference of
    exercise 9).

    For a token :math:`y \sim \pi` (the sampling not differentiated) a loss :math:`f(\log\pi_y)`
    has expected gradient :math:`\sum_y \pi_y f'_y (e_y - \pi)` with respect to the logits; the
    KL's gradient is :math:`\sum_y \pi_y (\log\pi_y - \log\pi_{\text{ref},y})(e_y - \pi)`, so
    any :math:`f' = \log\pi_y - \log\pi_{\text{ref},y} + c` works: here
    :math:`\tfrac12 (\log\pi_y - \log\pi_{\text{ref},y})^2` (Schulman's k2).

    Example:
        >>> kl_loss(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -1.0]))
        tensor([0.0000, 0.5000])
    """
    d = logp - logp_ref
    return 0.5 * d * d


def kl_expected_gradient(inputs: Mapping[str, Any], out: Any) -> Any:
    """``Exercise.postprocess`` of ``kl_loss``: the expected gradient with respect to the logits.

    The grader passes the log-probabilities of every token of ``R`` distributions over ``V``
    tokens, flattened and shuffled (``inputs["index"]`` says where each sits); the call adapter
    returns each token's ``d loss / d logp``. Weighted by the detached ``pi`` (the sampling) and
    taken through ``d log pi_y / d z = e_y - pi``, it is ``pi * g - pi * (pi . g)`` per row.
    """
    import numpy as np

    rows, vocab = inputs["shape"]
    index = np.asarray(inputs["index"])
    g = np.empty(rows * vocab)
    g[index] = np.asarray(out["grad"], dtype=np.float64)
    logp = np.empty(rows * vocab)
    logp[index] = inputs["logp"].to(f64).numpy()
    pi = np.exp(logp.reshape(rows, vocab))
    weighted = pi * g.reshape(rows, vocab)
    return weighted - pi * weighted.sum(-1, keepdims=True)


def _kl_cases() -> list[Case]:
    def build(seed: int, rows: int, vocab: int, dtype: torch.dtype, scale: float = 1.0,
              same: bool = False) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            z = randn(seed, rows, vocab, dtype=dtype, scale=scale)
            z_ref = z.clone() if same else randn(seed + 1, rows, vocab, dtype=dtype, scale=scale)
            index = torch.randperm(rows * vocab, generator=gen(seed + 2))  # position j holds
            return {"logp": z.log_softmax(-1).flatten()[index],  # entry index[j] of (rows, vocab)
                    "logp_ref": z_ref.log_softmax(-1).flatten()[index],
                    "index": index, "shape": (rows, vocab)}
        return inputs

    return [
        Case("float64, one distribution over 5 tokens", build(800, 1, 5, f64)),
        Case("float32, a batch of distributions", build(810, 4, 7, f32), rtol=1e-4, atol=1e-6),
        Case("float64, peaked distributions", build(820, 3, 6, f64, scale=3.0)),
        Case("float64, two tokens", build(830, 2, 2, f64)),
        Case("float64, the policy equal to the reference", build(840, 3, 4, f64, same=True)),
        Case("float64, sizes drawn for this grading run",
             lambda: build(850, pick(851, 1, 6), pick(852, 2, 40), f64)()),
    ]


def _kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    d = logp_ref - logp
    return d.exp() - d - 1


def _kl_k1(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    return logp - logp_ref


def _kl_away(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    return -0.5 * (logp - logp_ref) ** 2


def _kl_half(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    return 0.25 * (logp - logp_ref) ** 2


def _kl_weighted(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    return logp.exp() * (logp - logp_ref)


_KL_SLIPS = (
    Slip("that is k3 used as a loss: in expectation its gradient is pi - pi_ref, the gradient of "
         "KL(pi_ref || pi), not of KL(pi || pi_ref)", _kl_k3),
    Slip("log pi - log pi_ref used as a loss has expected gradient 0: under sampling from pi, "
         "E[grad log pi_y] = sum_y grad pi_y = 0", _kl_k1),
    Slip("your loss pushes the policy away from the reference: its expected gradient is minus "
         "the KL's", _kl_away),
    Slip("your expected gradient is half the KL's", _kl_half),
    Slip("the sampling already weighs each token by pi_y: a per-token loss must not multiply by "
         "pi_y again", _kl_weighted),
)


# 10. response_logprobs -------------------------------------------------------------------------


def response_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                      prompt_length: int) -> torch.Tensor:
    """``(B, T - prompt_length)``: the log-probability of each response token given everything
    before it (the reference of exercise 10), from ``logits = model(tokens)``, ``(B, T, V)``,
    whose position ``t`` is the distribution of the token at ``t + 1``.

    Example:
        >>> logits = torch.tensor([[[0.0, 0.0], [9.0, 0.0], [0.0, 0.0]]])
        >>> response_logprobs(logits, torch.tensor([[1, 1, 0]]), 1).exp().round(decimals=3)
        tensor([[0.5000, 1.0000]])
    """
    logp = logits.log_softmax(-1)[:, prompt_length - 1:-1]  # (B, N, V)
    return logp.gather(-1, tokens[:, prompt_length:, None])[..., 0]


def _logprob_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, prompt_length: int, dtype: torch.dtype = f32,
              scale: float = 2.0) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            return {"logits": randn(seed, B, T, V, dtype=dtype, scale=scale),
                    "tokens": torch.randint(0, V, (B, T), generator=gen(seed + 1)),
                    "prompt_length": prompt_length}
        return inputs

    return [
        Case("float32, a prompt of 4 tokens", build(1000, 3, 9, 6, 4)),
        Case("float64, a prompt of one token", build(1010, 2, 6, 5, 1, f64)),
        Case("float64, a response of one token", build(1020, 4, 7, 13, 6, f64)),
        Case("float32, batch size 1", build(1030, 1, 12, 4, 5)),
        Case("float64, sizes drawn for this grading run",
             lambda: build(1040, pick(1041, 1, 5), 10, pick(1042, 2, 20), pick(1043, 1, 9), f64)()),
    ]


def _logprobs_unshifted(logits: torch.Tensor, tokens: torch.Tensor,
                        prompt_length: int) -> torch.Tensor:
    logp = logits.log_softmax(-1)
    return logp.gather(-1, tokens[..., None])[..., 0][:, prompt_length:]


def _logprobs_probabilities(logits: torch.Tensor, tokens: torch.Tensor,
                            prompt_length: int) -> torch.Tensor:
    logp = logits.log_softmax(-1)[:, prompt_length - 1:-1]
    return logp.gather(-1, tokens[:, prompt_length:, None])[..., 0].exp()


def _logprobs_raw_logits(logits: torch.Tensor, tokens: torch.Tensor,
                         prompt_length: int) -> torch.Tensor:
    return logits[:, prompt_length - 1:-1].gather(-1, tokens[:, prompt_length:, None])[..., 0]


_LOGPROB_SLIPS = (
    Slip("that is the given code: it scores each response token with the distribution computed "
         "at its own position", _logprobs_unshifted),
    Slip("return log-probabilities, not probabilities", _logprobs_probabilities),
    Slip("normalise the logits over the vocabulary (log_softmax) before picking the token's",
         _logprobs_raw_logits),
)


# 11. pass_at_k_prediction -------------------------------------------------------------------------


_PASS_AT_K_PREDICTION = Question(
    id="reasoning.pass_at_k_prediction", choices="abc",
    hint=("GRPO pushes up the answers that a group already samples right, and pays nothing for "
          "a problem whose group is all wrong: think of the problems where the starting policy "
          "is right in only one of many samples."))


# 12. std_ablation_prediction ----------------------------------------------------------------------


_STD_PREDICTION = Question(
    id="reasoning.std_ablation_prediction", choices="abc",
    hint=("how large can the standard deviation of eight rewards of 0 or 1 be, so what does "
          "dividing by it do to the advantages? The KL penalty's weight beta does not change."))


EXERCISES = {ex.id: ex for ex in [  # in the notebook's order
    Exercise(id="reasoning.majority_vote", reference=reasoning.majority_vote,
             cases=_majority_cases, slips=_MAJORITY_SLIPS, call=each_call),
    Exercise(id="reasoning.pass_at_k", reference=reasoning.pass_at_k, cases=_pass_cases,
             slips=_PASS_SLIPS, forbidden=(reasoning.pass_at_k_curve,)),
    Exercise(id="reasoning.plug_in_bias", reference=reasoning.plug_in_bias, cases=_bias_cases,
             slips=_BIAS_SLIPS),
    _VERIFIER_PREDICTION,
    Exercise(id="reasoning.group_advantages", reference=rl.group_advantages, cases=_adv_cases,
             slips=_ADV_SLIPS, diagnose=_adv_diagnose, forbidden=(rl.centred_advantages,)),
    Exercise(id="reasoning.group_size", reference=group_size, cases=_size_cases,
             slips=_SIZE_SLIPS),
    Exercise(id="reasoning.rloo_advantages", reference=rl.rloo_advantages, cases=_adv_cases,
             slips=_RLOO_SLIPS, forbidden=(rl.centred_advantages,)),
    Exercise(id="reasoning.grpo_loss", reference=rl.grpo_loss, cases=_grpo_cases,
             slips=_GRPO_SLIPS, forbidden=(rl.k3_kl,), call=loss_and_grad),
    Exercise(id="reasoning.kl_loss", reference=kl_loss, cases=_kl_cases, slips=_KL_SLIPS,
             call=token_loss_grad, postprocess=kl_expected_gradient,
             forbidden=(rl.kl_gradients,)),
    Exercise(id="reasoning.response_logprobs", reference=response_logprobs,
             cases=_logprob_cases, slips=_LOGPROB_SLIPS, forbidden=(rl.token_logprobs,)),
    _PASS_AT_K_PREDICTION,
    _STD_PREDICTION,
]}
