"""Tests of course_lib.efficient_models: the recall model with linear and with entmax attention
computes what course_lib's linear_attention and entmax compute, has the softmax model's
parameters (entmax: plus one alpha per head), keeps alpha in (1, 2), and rejects bad input."""

from __future__ import annotations

import pytest
import torch

from course_lib import efficient_models as em
from course_lib import entmax, linear_attention
from course_lib import longrange as lr
from course_lib.multihead import merge_heads, split_heads

pytestmark = pytest.mark.ch06

CONFIG = lr.RecallConfig(n_keys=16, n_values=16, length=12, n_pairs=4)


def _batch(n: int = 5, seed: int = 0) -> lr.RecallBatch:
    return lr.make_recall_batch(CONFIG, n, torch.Generator().manual_seed(seed))


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _projections(model: lr.AttentionModel, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q of the last token, k and v of all tokens, (B, h, T, d_head), from the model's weights."""
    mha = model.attention
    q = split_heads(x[:, -1:] @ mha.q_proj.weight.T + mha.q_proj.bias, mha.n_heads)
    k = split_heads(x @ mha.k_proj.weight.T + mha.k_proj.bias, mha.n_heads)
    v = split_heads(x @ mha.v_proj.weight.T + mha.v_proj.bias, mha.n_heads)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_model_attention_equals_linear_attention(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = em.LinearAttentionModel(CONFIG, d_model=24, n_heads=3).to(dtype)
    b = _batch()
    x = model.embed(b.keys, b.values)                                 # (B, T, d)
    q, k, v = _projections(model, x)
    heads = linear_attention.linear_attention(q, k, v)                # (B, h, 1, d_head)
    # the query is the last token: causal and non-causal linear attention agree for it
    causal = linear_attention.causal_linear_attention(
        split_heads(model.attention.q_proj(x), 3), k, v)[:, :, -1:]
    torch.testing.assert_close(heads, causal)
    mha = model.attention
    expected = x[:, -1] + (merge_heads(heads) @ mha.out_proj.weight.T + mha.out_proj.bias)[:, 0]
    got, weights = model.attend(x, need_weights=True)
    torch.testing.assert_close(got, expected)
    # the weights are the kernel's, normalised: they reproduce the output of every head
    quadratic = linear_attention.kernel_attention(q, k, v)
    torch.testing.assert_close(weights @ v, quadratic)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, 3, 1, dtype=dtype))


def test_entmax_model_attention_equals_entmax_attention() -> None:
    torch.manual_seed(0)
    model = em.EntmaxAttentionModel(CONFIG, d_model=24, n_heads=3, alpha=1.3).double()
    with torch.no_grad():
        model.alpha_logit.copy_(torch.tensor([-2.0, 0.0, 3.0]))
    b = _batch()
    x = model.embed(b.keys, b.values)
    q, k, v = _projections(model, x)
    for h in range(3):  # each head with its own alpha, as a float
        alpha = 1 + torch.sigmoid(model.alpha_logit[h]).item()
        out, w = entmax.entmax_attention(q[:, h], k[:, h], v[:, h], alpha=alpha)
        got, weights = model.weigh(q, k, v)
        torch.testing.assert_close(got[:, h], out)
        torch.testing.assert_close(weights[:, h], w)


def test_parameter_counts_match_the_softmax_model() -> None:
    softmax = lr.AttentionModel(CONFIG, d_model=32, n_heads=4)
    assert _n_params(em.LinearAttentionModel(CONFIG, d_model=32, n_heads=4)) == _n_params(softmax)
    assert _n_params(em.EntmaxAttentionModel(CONFIG, d_model=32, n_heads=4)) == \
        _n_params(softmax) + 4


@pytest.mark.parametrize("make", [em.LinearAttentionModel, em.EntmaxAttentionModel])
@pytest.mark.parametrize("batch", [1, 6])
def test_shapes(make: type, batch: int) -> None:
    model = make(CONFIG, d_model=16, n_heads=2)
    b = _batch(batch)
    assert model(b.keys, b.values).shape == (batch, CONFIG.n_values)
    w = model.attention_weights(b.keys, b.values)
    assert w.shape == (batch, 2, CONFIG.length)
    torch.testing.assert_close(w.sum(-1), torch.ones(batch, 2))
    assert bool((w >= 0).all())


def test_entmax_alpha_stays_in_range_and_learns() -> None:
    torch.manual_seed(0)
    model = em.EntmaxAttentionModel(CONFIG, d_model=16, n_heads=2, alpha=1.5)
    torch.testing.assert_close(model.alpha.detach(), torch.full((2,), 1.5))
    b = _batch(16)
    loss = torch.nn.functional.cross_entropy(model(b.keys, b.values), b.target)
    loss.backward()
    assert model.alpha_logit.grad is not None and bool(model.alpha_logit.grad.ne(0).any())
    with torch.no_grad():
        model.alpha_logit.copy_(torch.tensor([-30.0, 30.0]))
    alpha = model.alpha.detach()
    assert bool((alpha >= 1 + em.MIN_EXCESS).all()) and bool((alpha <= 2).all())
    assert model(b.keys, b.values).isfinite().all()  # entmax accepts the extreme alphas


def test_entmax_model_gives_exact_zeros() -> None:
    torch.manual_seed(0)
    model = em.EntmaxAttentionModel(CONFIG, d_model=16, n_heads=2, alpha=1.9)
    with torch.no_grad():
        model.attention.q_proj.weight.mul_(20)  # sharp scores
    w = model.attention_weights(*(lambda b: (b.keys, b.values))(_batch(8)))
    assert bool((w == 0).any())


def test_models_train_with_train_recall() -> None:
    for make in (em.LinearAttentionModel, em.EntmaxAttentionModel):
        torch.manual_seed(0)
        losses = lr.train_recall(make(CONFIG, d_model=16, n_heads=2),
                                 lr.TrainConfig(steps=3, batch_size=4))
        assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


@pytest.mark.parametrize("make", [em.LinearAttentionModel, em.EntmaxAttentionModel])
def test_bad_inputs_raise_clear_errors(make: type) -> None:
    model = make(CONFIG, d_model=16, n_heads=2)
    b = _batch(3)
    with pytest.raises(ValueError, match="torch.long"):
        model(b.keys.float(), b.values)
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        model(b.keys[0], b.values[0])
    with pytest.raises(ValueError, match="same shape"):
        model(b.keys, b.values[:, :-1])
    with pytest.raises(ValueError, match="keys ids must lie in 0..16"):
        model(b.keys + 100, b.values)
    with pytest.raises(ValueError, match="d_model=16"):
        model.attend(torch.randn(3, 12, 8))
    with pytest.raises(ValueError, match="not divisible"):
        make(CONFIG, d_model=10, n_heads=3)


@pytest.mark.parametrize("alpha", [1.0, 2.0, 0.5, 3.0])
def test_entmax_model_rejects_alpha_outside_the_open_interval(alpha: float) -> None:
    with pytest.raises(ValueError, match=r"alpha must lie in \(1, 2\)"):
        em.EntmaxAttentionModel(CONFIG, d_model=16, n_heads=2, alpha=alpha)
