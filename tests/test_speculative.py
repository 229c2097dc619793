"""Speculative decoding (course_lib.speculative): greedy equals the target's greedy output, and the
sampled sequences have exactly the target's distribution (computed exactly on a tiny vocabulary,
and checked on samples with a chi-square test at significance 0.001)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from course_lib import speculative
from course_lib.llama import LlamaConfig, LlamaForCausalLM, generate

pytestmark = pytest.mark.ch07

f64 = torch.float64
V = 3


def _toy(seed: int, scale: float):
    """A model over V tokens whose logits depend on the last token, the position and the first."""
    g = torch.Generator().manual_seed(seed)
    a, b, c = (scale * torch.randn(V, V, generator=g, dtype=f64),
               scale * torch.randn(32, V, generator=g, dtype=f64),
               scale * torch.randn(V, V, generator=g, dtype=f64))

    def logits(tokens: torch.Tensor) -> torch.Tensor:  # (1, t) -> (1, t, V)
        t = tokens.shape[1]
        return (a[tokens[0]] + b[:t] + c[tokens[0, 0]])[None]

    return logits


TARGET, DRAFT = _toy(0, 1.5), _toy(1, 1.0)


def _p(model, seq):
    return model(torch.tensor([seq]))[0].softmax(-1)  # (t, V)


def target_distribution(prompt: list[int], n: int) -> dict[tuple[int, ...], float]:
    out = {}
    for tail in itertools.product(range(V), repeat=n):
        seq, prob = list(prompt), 1.0
        for x in tail:
            prob *= float(_p(TARGET, seq)[-1, x])
            seq.append(x)
        out[tail] = prob
    return out


def speculative_distribution(prompt: list[int], n: int, k: int) -> dict[tuple[int, ...], float]:
    """The exact law of speculative sampling's output: every draft, every acceptance outcome.

    The uniform u_i only matters through which side of p_i(x_i)/q_i(x_i) it falls, so
    course_lib's ``accept_step`` is evaluated at the midpoint of each interval and weighted by
    the interval's length."""
    if n == 0:
        return {(): 1.0}
    out: dict[tuple[int, ...], float] = {}
    kk = min(k, n - 1)
    for drafts in itertools.product(range(V), repeat=kk):
        seq, q_rows, q_prob = list(prompt), [], 1.0
        for x in drafts:
            q = _p(DRAFT, seq)[-1]
            q_rows.append(q)
            q_prob *= float(q[x])
            seq.append(x)
        if q_prob == 0:
            continue
        p = _p(TARGET, seq)[len(prompt) - 1:]  # (kk + 1, V)
        q_all = torch.stack(q_rows) if q_rows else p.new_zeros(0, V)
        d = torch.tensor(drafts, dtype=torch.long)
        ratios = [min(1.0, float(p[i, x] / q_all[i, x])) for i, x in enumerate(drafts)]
        intervals = [[(lo, hi) for lo, hi in ((0.0, r), (r, 1.0)) if hi > lo] for r in ratios]
        for combo in itertools.product(*intervals):
            weight = math.prod(hi - lo for lo, hi in combo)
            u = torch.tensor([(lo + hi) / 2 for lo, hi in combo], dtype=f64)
            accepted, dist = speculative.accept_step(p, q_all, d, u)
            for x in range(V):
                if dist[x] <= 0:
                    continue
                emitted = tuple(drafts[:accepted]) + (x,)
                rest = speculative_distribution(prompt + list(emitted), n - len(emitted), k)
                for tail, prob in rest.items():
                    key = emitted + tail
                    out[key] = out.get(key, 0.0) + q_prob * weight * float(dist[x]) * prob
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_exact_distribution_equals_the_targets(k):
    prompt, n = [1], 3
    expected, got = target_distribution(prompt, n), speculative_distribution(prompt, n, k)
    assert sum(got.values()) == pytest.approx(1.0, abs=1e-12)
    for seq, prob in expected.items():
        assert got.get(seq, 0.0) == pytest.approx(prob, abs=1e-12), seq


def test_accepting_with_q_over_p_would_not_be_exact():
    """The test above can fail: the same enumeration with the ratio inverted misses the target."""
    original = speculative.accept_step

    def inverted(p, q, drafts, u):  # accepts with probability q/p (p and q swapped)
        return original(torch.cat([q, p[-1:]]), p[:-1], drafts, u)

    prompt = [1]
    expected = target_distribution(prompt, 2)
    try:
        speculative.accept_step = inverted
        got = speculative_distribution(prompt, 2, 1)
    finally:
        speculative.accept_step = original
    assert max(abs(got.get(s, 0.0) - p) for s, p in expected.items()) > 1e-3


def test_sampled_sequences_pass_a_chi_square_test():
    """6000 sequences of 2 tokens (9 outcomes, 8 degrees of freedom) at significance 0.001."""
    prompt, n, samples = [2], 2, 6000
    expected = target_distribution(prompt, n)
    counts = dict.fromkeys(expected, 0)
    g = torch.Generator().manual_seed(7)
    for _ in range(samples):
        out, _ = speculative.speculative_generate(TARGET, DRAFT, torch.tensor([prompt]), n, k=2,
                                                  generator=g)
        counts[tuple(out[0, 1:].tolist())] += 1
    chi2 = sum((counts[s] - samples * p) ** 2 / (samples * p) for s, p in expected.items())
    assert chi2 < 26.12  # the 0.999 quantile of chi-square with 8 degrees of freedom


def test_greedy_equals_the_targets_greedy_output():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=13, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, init_std=0.3)
    target = LlamaForCausalLM(cfg).double().eval()
    draft = LlamaForCausalLM(LlamaConfig(vocab_size=13, hidden_size=8, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, init_std=0.3)).double().eval()
    prompt = torch.tensor([[3, 1, 4]])
    expected = generate(target, prompt, 20)
    for k in (1, 3, 5):
        out, stats = speculative.speculative_generate(target, draft, prompt, 20, k=k, greedy=True)
        assert torch.equal(out, expected)
        assert stats["target_calls"] <= 20


def test_identical_draft_is_always_accepted():
    out, stats = speculative.speculative_generate(TARGET, TARGET, torch.tensor([[0]]), 9, k=4,
                                                  generator=torch.Generator().manual_seed(0))
    assert stats["accepted"] == stats["proposed"] and stats["target_calls"] == 2


def test_acceptance_probability_and_expected_tokens():
    p, q = torch.tensor([0.2, 0.8]), torch.tensor([0.6, 0.4])
    assert float(speculative.acceptance_probability(p, q)) == pytest.approx(0.6)
    assert speculative.expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)
