"""Tests of course_lib.alignment: kernel regression, additive/dot/general scores, context."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.alignment import (
    AdditiveAttention,
    LuongAttention,
    additive_score,
    context_vector,
    dot_score,
    general_score,
    nadaraya_watson,
)


def randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# Known answers ------------------------------------------------------------------------------

def test_nadaraya_watson_known_answer() -> None:
    # Query at 0, keys at 0 and 1, h = 1: weights proportional to exp(0) and exp(-1/2).
    pred, w = nadaraya_watson(torch.tensor([0.0]), torch.tensor([0.0, 1.0]),
                              torch.tensor([1.0, 3.0]))
    a = 1 / (1 + math.exp(-0.5))
    assert torch.allclose(w, torch.tensor([[a, 1 - a]]))
    assert math.isclose(pred.item(), a * 1 + (1 - a) * 3, rel_tol=1e-6)


def test_additive_score_known_answer() -> None:
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[0.0, 1.0], [1.0, 1.0]]])  # (1, 2, 2)
    W_q = torch.tensor([[1.0, 0.0]])  # d_a = 1
    W_k = torch.tensor([[0.0, 2.0]])
    v = torch.tensor([3.0])
    # key 0: 3 tanh(1 + 2) ; key 1: 3 tanh(1 + 2) too; change key 1's first entry: no effect.
    expected = torch.tensor([[[3 * math.tanh(3.0), 3 * math.tanh(3.0)]]])
    assert torch.allclose(additive_score(q, k, W_q, W_k, v), expected)
    assert torch.allclose(additive_score(q, 0.5 * k, W_q, W_k, v),
                          torch.full((1, 1, 2), 3 * math.tanh(2.0)))


def test_luong_scores_known_answers() -> None:
    q = torch.tensor([[[1.0, 2.0]]])
    k = torch.tensor([[[3.0, 4.0], [-1.0, 0.0]]])
    assert dot_score(q, k).tolist() == [[[11.0, -1.0]]]
    W = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # swaps the key's coordinates
    assert general_score(q, k, W).tolist() == [[[10.0, -2.0]]]


def test_context_vector_known_answer() -> None:
    scores = torch.tensor([[[0.0, math.log(3.0), 7.0]]])
    values = torch.tensor([[[4.0], [8.0], [100.0]]])
    ctx, w = context_vector(scores, values, torch.tensor([[[True, True, False]]]))
    assert torch.allclose(w, torch.tensor([[[0.25, 0.75, 0.0]]]))
    assert torch.allclose(ctx, torch.tensor([[[7.0]]]))


# Properties ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weights_sum_to_one_and_padding_gets_zero(dtype: torch.dtype) -> None:
    B, T_q, T_k = 3, 4, 6
    lengths = torch.tensor([6, 2, 4])
    mask = (torch.arange(T_k)[None] < lengths[:, None])[:, None, :]  # (B, 1, T_k)
    scores = additive_score(randn(1, B, T_q, 5, dtype=dtype), randn(2, B, T_k, 7, dtype=dtype),
                            randn(3, 8, 5, dtype=dtype), randn(4, 8, 7, dtype=dtype),
                            randn(5, 8, dtype=dtype))
    assert scores.shape == (B, T_q, T_k) and scores.dtype == dtype
    ctx, w = context_vector(scores, randn(6, B, T_k, 2, dtype=dtype), mask)
    assert ctx.shape == (B, T_q, 2)
    assert torch.allclose(w.sum(-1), torch.ones(B, T_q, dtype=dtype))
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()
    assert (w >= 0).all()


def test_fully_masked_query_gets_zero_context_not_nan() -> None:
    mask = torch.tensor([[[False, False, False], [True, False, True]]])
    ctx, w = context_vector(randn(1, 1, 2, 3), randn(2, 1, 3, 4), mask)
    assert not torch.isnan(ctx).any() and (ctx[0, 0] == 0).all() and (w[0, 0] == 0).all()


def test_padding_does_not_change_the_context() -> None:
    """Appending padded keys (any values) leaves the context of real keys unchanged."""
    scores, values = randn(1, 2, 3, 4), randn(2, 2, 4, 5)
    ctx, _ = context_vector(scores, values)
    padded_scores = torch.cat([scores, 50 * randn(3, 2, 3, 2)], dim=-1)
    padded_values = torch.cat([values, randn(4, 2, 2, 5)], dim=1)
    mask = torch.tensor([True] * 4 + [False] * 2)[None, None, :]
    ctx2, _ = context_vector(padded_scores, padded_values, mask)
    assert torch.allclose(ctx, ctx2)


def test_kernel_regression_bandwidth_limits() -> None:
    keys = torch.linspace(0, 1, 5, dtype=torch.float64)
    values = keys ** 2
    # Tiny bandwidth: each key predicts its own value; huge bandwidth: the mean of the values.
    pred, _ = nadaraya_watson(keys, keys, values, bandwidth=1e-3)
    assert torch.allclose(pred, values)
    pred, _ = nadaraya_watson(keys, keys, values, bandwidth=1e3)
    assert torch.allclose(pred, values.mean().expand(5), atol=1e-6)


# Peer equivalence ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_luong_dot_attention_matches_sdpa_with_scale_one(dtype: torch.dtype) -> None:
    q, k, v = (randn(1, 2, 3, 8, dtype=dtype), randn(2, 2, 5, 8, dtype=dtype),
               randn(3, 2, 5, 4, dtype=dtype))
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, :]
    ctx, _ = context_vector(dot_score(q, k), v, mask)
    peer = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    torch.testing.assert_close(ctx, peer)


def test_modules_use_the_functions() -> None:
    torch.manual_seed(0)
    att = AdditiveAttention(5, 7, 6)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, 7)
    mask = torch.tensor([[True] * 4, [True, False, False, False]])[:, None, :]
    ctx, w = att(q, k, mask)
    scores = additive_score(q, k, att.W_q.weight, att.W_k.weight, att.v)
    torch.testing.assert_close((ctx, w), context_vector(scores, k, mask))
    assert w[1, :, 1:].abs().max() == 0
    luong = LuongAttention(5, 7, "general")
    torch.testing.assert_close(luong(q, k)[1], context_vector(general_score(q, k, luong.W), k)[1])
    dot = LuongAttention(7, 7, "dot")
    assert sum(p.numel() for p in dot.parameters()) == 0


def test_bad_shapes_are_named() -> None:
    with pytest.raises(ValueError, match="d_a"):
        additive_score(torch.zeros(1, 1, 2), torch.zeros(1, 1, 3), torch.zeros(4, 2),
                       torch.zeros(5, 3), torch.zeros(4))
    with pytest.raises(ValueError, match="one size"):
        dot_score(torch.zeros(1, 1, 2), torch.zeros(1, 1, 3))
    with pytest.raises(ValueError, match="keys"):
        context_vector(torch.zeros(1, 1, 3), torch.zeros(1, 4, 2))
    with pytest.raises(ValueError, match="dot"):
        LuongAttention(3, 4, "dot")
