"""Sampling knobs compared as filtered logits and distributions, never as single random samples."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import decoding
from course_lib.sampling import (
    apply_temperature,
    distinct_ngrams,
    filter_logits,
    filtered_distribution,
    sample,
    sample_next,
    top_k_filter,
    top_p_filter,
)

pytestmark = pytest.mark.ch04

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]


def _kept(logits: torch.Tensor) -> list[bool]:
    return torch.isfinite(logits).tolist()


# --- temperature and top-k --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_temperature_is_softmax_of_scaled_logits(dtype: torch.dtype) -> None:
    logits = torch.randn(4, 9, dtype=dtype, generator=torch.Generator().manual_seed(0))
    for t in (0.25, 1.0, 3.0):
        torch.testing.assert_close(filtered_distribution(logits, temperature=t),
                                   torch.softmax(logits / t, dim=-1))
    # T -> 0 concentrates on the argmax, T -> infinity flattens towards uniform.
    cold = filtered_distribution(logits, temperature=1e-3)
    torch.testing.assert_close(cold, filtered_distribution(logits, temperature=0))
    hot = filtered_distribution(logits, temperature=1e4)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 9), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        apply_temperature(logits, -1.0)


def test_top_k_keeps_the_k_largest_and_ties_with_the_kth() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0, 3.0, 0.5], [5.0, 1.0, 1.0, 1.0, 0.0]])
    assert _kept(top_k_filter(logits, 2)) == [[False, True, False, True, False],
                                              [True, True, True, True, False]]  # ties kept
    assert torch.equal(top_k_filter(logits, 5), logits)
    assert torch.equal(top_k_filter(logits, 50), logits)
    kept = top_k_filter(logits, 1)
    assert torch.equal(kept[0, 3], logits[0, 3]) and _kept(kept)[0].count(True) == 1
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        top_k_filter(logits, 0)


# --- top-p ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.float16, torch.bfloat16])
def test_top_p_exact_boundary_keeps_the_smallest_set(dtype: torch.dtype) -> None:
    logits = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64).log().to(dtype)
    assert _kept(top_p_filter(logits, 0.8)) == [False, True, True]   # 0.5 + 0.3 reaches 0.8
    assert _kept(top_p_filter(logits, 0.5)) == [False, True, False]  # 0.5 alone reaches 0.5
    assert _kept(top_p_filter(logits, 0.85)) == [True, True, True]
    assert _kept(top_p_filter(logits, 0.75)) == [False, True, True]
    assert _kept(top_p_filter(logits, 1e-9)) == [False, True, False]  # the top token stays
    dyadic = torch.tensor([0.125, 0.5, 0.25, 0.125], dtype=torch.float64).log().to(dtype)
    assert _kept(top_p_filter(dyadic, 0.75)) == [False, True, True, False]
    assert _kept(top_p_filter(dyadic, 0.875)) == [True, True, True, False]  # stable: first 1/8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [10, 100, 1000, 50257])
def test_top_p_on_uniform_logits_keeps_exactly_m_of_v_tokens(vocab: int,
                                                             dtype: torch.dtype) -> None:
    """p = m / V is an exact boundary: m tokens reach it. A plain cumulative sum misses some
    (0.1 summed eight times is 0.7999999999999999 < 0.8 in float64, so it would keep nine)."""
    logits = torch.zeros(vocab, dtype=dtype)
    for m in sorted({1, 2, 3, 6, 8, 9, vocab // 7, vocab // 3, vocab // 2, vocab - 1} - {0}):
        kept = top_p_filter(logits, m / vocab)
        assert int(torch.isfinite(kept).sum()) == m, (vocab, m)
        assert bool(torch.isfinite(kept[:m]).all())  # ties are taken in vocabulary order


def test_top_p_equals_the_definition_away_from_boundaries() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        logits = 2 * torch.randn(2, 30, dtype=torch.float64, generator=g)
        p = float(torch.rand(1, generator=g)) * 0.98 + 0.01
        probs = torch.softmax(logits, dim=-1)
        for row in range(2):
            order = probs[row].argsort(descending=True).tolist()
            expected, mass = set(), 0.0
            for v in order:  # the definition: add tokens by probability until p is reached
                expected.add(v)
                mass += probs[row, v].item()
                if mass >= p:
                    break
            got = set(torch.isfinite(top_p_filter(logits[row], p)).nonzero()[:, 0].tolist())
            assert got == expected


def test_top_p_keeps_logit_values_and_does_not_depend_on_vocabulary_order() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 40, generator=g)
    kept = top_p_filter(logits, 0.7)
    finite = torch.isfinite(kept)
    assert torch.equal(kept[finite], logits[finite])
    perm = torch.randperm(40, generator=g)
    assert torch.equal(top_p_filter(logits[:, perm], 0.7), kept[:, perm])
    assert torch.equal(top_p_filter(logits, 1.0), logits)
    with pytest.raises(ValueError, match="p must be in"):
        top_p_filter(logits, 0.0)


def test_filters_compose_in_order_temperature_top_k_top_p() -> None:
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    # T = 2 flattens; top-k = 4 drops the last; top-p = 0.6 keeps the top two of the rest.
    out = filter_logits(logits, temperature=2.0, top_k=4, top_p=0.6)
    probs = torch.softmax(logits[:4] / 2, dim=0)
    assert probs[0] < 0.6 <= probs[:2].sum()
    assert _kept(out) == [True, True, False, False, False]
    torch.testing.assert_close(out[:2], logits[:2] / 2)
    dist = filtered_distribution(logits, temperature=2.0, top_k=4, top_p=0.6)
    torch.testing.assert_close(dist[:2], probs[:2] / probs[:2].sum())


# --- sampling draws from the filtered distribution --------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_samples_follow_the_filtered_distribution(device: str) -> None:
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.0, -1.0, -3.0]], device=device)
    n = 20_000
    for knobs in ({}, {"temperature": 0.7}, {"top_k": 3}, {"top_p": 0.8},
                  {"temperature": 1.5, "top_k": 4, "top_p": 0.9}):
        target = filtered_distribution(logits, **knobs)[0].cpu().double()
        g = torch.Generator(device=device).manual_seed(0)
        draws = sample_next(logits.expand(n, -1), g, **knobs).cpu()
        freq = torch.bincount(draws, minlength=6).double() / n
        sigma = (target * (1 - target) / n).sqrt()
        assert bool((freq - target).abs().le(5 * sigma + 1e-12).all()), (knobs, freq, target)
        assert bool((freq[target == 0] == 0).all())  # filtered tokens are never drawn


def test_same_seed_same_tokens_and_temperature_zero_is_greedy() -> None:
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(1))
    a = sample_next(logits, torch.Generator().manual_seed(5), top_p=0.9)
    b = sample_next(logits, torch.Generator().manual_seed(5), top_p=0.9)
    assert torch.equal(a, b)
    assert torch.equal(sample_next(logits, temperature=0), logits.argmax(-1))


def test_sample_loop_matches_the_markov_chain_it_samples() -> None:
    # Two tokens; after 0: p(1) = 0.8; after 1: p(0) = 0.3.
    probs = torch.tensor([[[0.2, 0.8], [0.3, 0.7]]], dtype=torch.float64)
    step = decoding.markov_step(probs.log())
    n = 4000
    out = sample(step, torch.zeros(n, 1, dtype=torch.long), 2, torch.Generator().manual_seed(0))
    assert out.shape == (n, 3)
    first = out[:, 1].double().mean().item()
    assert abs(first - 0.8) < 5 * math.sqrt(0.8 * 0.2 / n)
    after_one = out[out[:, 1] == 1, 2].double().mean().item()
    assert abs(after_one - 0.7) < 5 * math.sqrt(0.7 * 0.3 / (out[:, 1] == 1).sum().item())
    greedy = decoding.greedy_decode(step, torch.zeros(1, 1, dtype=torch.long), 5)
    assert torch.equal(sample(step, torch.zeros(1, 1, dtype=torch.long), 5, temperature=0),
                       greedy)


def test_sample_stops_rows_at_eos_and_pads_them() -> None:
    step, bos, eos = decoding.greedy_vs_beam_example()
    out = sample(step, torch.full((64, 1), bos), 10, torch.Generator().manual_seed(0),
                 eos_id=eos)
    assert out.shape[1] <= 4  # every sequence of this model ends within three tokens
    assert bool((out[:, 1:] == eos).any(dim=1).all())
    for row in out.tolist():
        assert all(t == eos for t in row[row.index(eos):])  # padded with eos after eos
    with pytest.raises(ValueError, match="prompt must be"):
        sample(step, torch.zeros(1, 0, dtype=torch.long), 3)


def test_distinct_ngrams() -> None:
    assert distinct_ngrams(torch.tensor([[1, 2, 3, 4]]), 2) == 1.0
    assert distinct_ngrams([[7, 7, 7, 7]], 1) == 0.25
    assert distinct_ngrams([[1]], 2) == 0.0
