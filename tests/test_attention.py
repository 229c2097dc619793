"""Tests of course_lib.attention: known answers, properties, the two paths, errors, peers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import (
    additive_mask,
    attention_mask,
    cached_attention_step,
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

pytestmark = pytest.mark.ch02

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _qkv(seed: int, shape_q: tuple[int, ...], t_k: int, d_v: int, dtype: torch.dtype,
         device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    *batch, t_q, d_k = shape_q
    q = torch.randn(*batch, t_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, t_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, t_k, d_v, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


def _random_mask(seed: int, *shape: int, fully_masked_row: bool = True) -> torch.Tensor:
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    mask[..., 0] = True
    if fully_masked_row:
        mask[..., 1, :] = False  # query 1 may attend to nothing
    return mask


# ---- known answers -------------------------------------------------------------------------

def test_masked_softmax_known_answer() -> None:
    w = masked_softmax(torch.tensor([[0.0, 0.0, 5.0], [1.0, 2.0, 3.0]]),
                       torch.tensor([[True, True, False], [False, False, False]]))
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]))


def test_attention_known_answer_by_hand() -> None:
    # One query (1, 0), keys (1, 0) and (0, 1), d_k = 2: scores 1/sqrt(2) and 0.
    q = torch.tensor([[[1.0, 0.0]]], dtype=torch.float64)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    v = torch.tensor([[[10.0], [20.0]]], dtype=torch.float64)
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    a = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + 1)
    torch.testing.assert_close(w, torch.tensor([[[a, 1 - a]]], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([[[10 * a + 20 * (1 - a)]]], dtype=torch.float64))


def test_causal_mask_known_answers() -> None:
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False],
                                       [True, True, True]]
    assert causal_mask(2, n_keys=4).tolist() == [[True, True, True, False], [True] * 4]
    assert causal_mask(1, n_keys=3).tolist() == [[True, True, True]]
    assert causal_mask(0).shape == (0, 0)


def test_padding_mask_and_additive_mask() -> None:
    m = padding_mask(torch.tensor([1, 3, 0]), max_len=4)
    assert m.tolist() == [[True, False, False, False], [True, True, True, False], [False] * 4]
    bias = additive_mask(m[0], torch.float64)
    assert bias.dtype == torch.float64
    assert bias.tolist() == [0.0, -math.inf, -math.inf, -math.inf]


def test_additive_bias_equals_masked_softmax_where_a_key_is_allowed() -> None:
    scores = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    mask = _random_mask(1, 4, 6, fully_masked_row=False)
    torch.testing.assert_close(torch.softmax(scores + additive_mask(mask), -1),
                               masked_softmax(scores, mask))


def test_attention_mask_combines_padding_and_causal() -> None:
    key_padding = padding_mask(torch.tensor([2, 3]), 3)
    mask = attention_mask(key_padding, causal_mask(3))
    assert mask.shape == (2, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert mask[1, 0].tolist() == causal_mask(3).tolist()
    assert attention_mask() is None
    assert attention_mask(attn=causal_mask(3)[None].expand(2, 3, 3)).shape == (2, 1, 3, 3)


# ---- properties ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_weights_are_distributions_zero_where_masked(device: str, dtype: torch.dtype) -> None:
    q, k, v = _qkv(0, (2, 3, 5, 8), 7, 4, dtype, device)
    mask = _random_mask(1, 2, 3, 5, 7).to(device)
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert out.shape == (2, 3, 5, 4) and w.shape == (2, 3, 5, 7)
    assert out.dtype == dtype and out.device.type == device
    assert (w >= 0).all() and (w[~mask] == 0).all()
    sums = w.sum(-1)
    torch.testing.assert_close(sums[mask.any(-1)], torch.ones_like(sums[mask.any(-1)]))
    assert (sums[~mask.any(-1)] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("masked", ["none", "causal", "padding", "random with empty row"])
def test_reference_and_fast_paths_agree(device: str, dtype: torch.dtype, masked: str) -> None:
    q, k, v = _qkv(2, (2, 4, 6, 16), 6, 8, dtype, device)
    mask = {"none": None,
            "causal": causal_mask(6, device),
            "padding": padding_mask(torch.tensor([6, 2], device=device))[:, None, None, :],
            "random with empty row": _random_mask(3, 2, 4, 6, 6).to(device)}[masked]
    ref = scaled_dot_product_attention(q, k, v, mask, impl="reference")
    fast = scaled_dot_product_attention(q, k, v, mask, impl="fast")
    torch.testing.assert_close(fast, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_path_is_torch_sdpa_when_every_query_has_a_key(dtype: torch.dtype) -> None:
    q, k, v = _qkv(4, (3, 5, 8), 9, 2, dtype, "cpu")
    mask = _random_mask(5, 3, 5, 9, fully_masked_row=False)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask, impl="fast"),
                               expected, rtol=0, atol=0)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, scale=0.3, impl="fast"),
                               F.scaled_dot_product_attention(q, k, v, scale=0.3), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(device: str, dtype: torch.dtype,
                                                           impl: str) -> None:
    q, k, v = _qkv(6, (2, 4, 5), 5, 3, dtype, device)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = _random_mask(7, 2, 4, 5).to(device)  # query 1 sees nothing
    out = scaled_dot_product_attention(q, k, v, mask, impl=impl)
    assert torch.isfinite(out).all()
    assert (out[:, 1] == 0).all()
    (out ** 2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, 1] == 0).all()


def test_masked_softmax_gradient_matches_plain_softmax_on_allowed_entries() -> None:
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, False, False, True], [False] * 5])
    weights = masked_softmax(scores, mask)
    (weights * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    grad = scores.grad.clone()
    scores.grad = None
    plain = torch.softmax(scores[:2].masked_fill(~mask[:2], float("-inf")), -1)
    (plain * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(grad[:2], scores.grad[:2])
    assert (grad[2] == 0).all()


def test_scaling_keeps_score_variance_near_one() -> None:
    g = torch.Generator().manual_seed(0)
    for d_k in (4, 64, 512):
        q = torch.randn(4000, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(4000, d_k, generator=g, dtype=torch.float64)
        raw = (q * k).sum(-1)
        assert abs(raw.var().item() / d_k - 1) < 0.1
        assert abs((raw / math.sqrt(d_k)).var().item() - 1) < 0.1


def test_two_dimensional_inputs_and_broadcast_batch() -> None:
    q, k, v = _qkv(8, (4, 3), 6, 2, torch.float64, "cpu")
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert out.shape == (4, 2) and w.shape == (4, 6)
    batched = scaled_dot_product_attention(q.expand(5, 4, 3), k, v)  # key shared by the batch
    torch.testing.assert_close(batched, out.expand(5, 4, 2))


def test_dropout_is_applied_to_the_weights_only_when_asked() -> None:
    q, k, v = _qkv(9, (1, 4, 8), 4, 4, torch.float32, "cpu")
    torch.manual_seed(0)
    _, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5, return_weights=True)
    assert (w == 0).any()
    _, w0 = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert (w0 > 0).all()


# ---- errors --------------------------------------------------------------------------------

def test_error_key_and_value_lengths_differ() -> None:
    q, k, _ = _qkv(0, (1, 2, 4), 5, 3, torch.float32, "cpu")
    v = torch.randn(1, 6, 3)
    with pytest.raises(ValueError, match=r"key and value must have the same length; got 5 .* 6"):
        scaled_dot_product_attention(q, k, v)


def test_error_query_and_key_feature_sizes_differ() -> None:
    with pytest.raises(ValueError, match="same feature size d_k; got 4 .* 3"):
        scaled_dot_product_attention(torch.randn(1, 2, 4), torch.randn(1, 3, 3),
                                     torch.randn(1, 3, 3))


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_error_mask_does_not_broadcast(impl: str) -> None:
    q, k, v = _qkv(0, (2, 3, 4), 5, 4, torch.float32, "cpu")
    with pytest.raises(ValueError,
                       match=r"mask of shape \(2, 4\) does not broadcast .*\(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 4, dtype=torch.bool), impl=impl)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 3, 5\) does not broadcast"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 1, 3, 5, dtype=torch.bool), impl=impl)


def test_error_mask_must_be_boolean_and_impl_known() -> None:
    q, k, v = _qkv(0, (1, 3, 4), 3, 4, torch.float32, "cpu")
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 3))
    with pytest.raises(TypeError, match="boolean"):
        masked_softmax(torch.zeros(3), torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="impl must be 'reference' or 'fast', got 'flash'"):
        scaled_dot_product_attention(q, k, v, impl="flash")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not return weights"):
        scaled_dot_product_attention(q, k, v, impl="fast", return_weights=True)
    with pytest.raises(TypeError, match="dtypes differ"):
        scaled_dot_product_attention(q, k.double(), v)


def test_error_causal_mask_and_attention_mask_shapes() -> None:
    with pytest.raises(ValueError, match="length=3, n_keys=2"):
        causal_mask(3, n_keys=2)
    with pytest.raises(ValueError, match="key_padding has 4 keys but attn has 3"):
        attention_mask(torch.ones(2, 4, dtype=torch.bool), causal_mask(3))
    with pytest.raises(ValueError, match="lengths must be 1-D"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))


# ---- one decoding step with a key-value cache ------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cached_steps_equal_causal_attention_over_the_whole_sequence(device: str,
                                                                     dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    B, T, d_model, d_k, d_v = 3, 6, 10, 4, 3
    x = torch.randn(B, T, d_model, generator=g, dtype=dtype).to(device)
    w_q, w_k, w_v = (torch.randn(n, d_model, generator=g, dtype=dtype).to(device)
                     for n in (d_k, d_k, d_v))
    k = torch.zeros(B, 0, d_k, dtype=dtype, device=device)
    v = torch.zeros(B, 0, d_v, dtype=dtype, device=device)
    steps = []
    for t in range(T):
        y, k, v = cached_attention_step(x[:, t], w_q, w_k, w_v, k, v)
        assert k.shape == (B, t + 1, d_k) and v.shape == (B, t + 1, d_v)
        steps.append(y)
    # the peer: torch's fused attention over the whole sequence, causal
    expected = F.scaled_dot_product_attention(x @ w_q.T, x @ w_k.T, x @ w_v.T, is_causal=True)
    torch.testing.assert_close(torch.stack(steps, 1), expected, **TOL[dtype])
    torch.testing.assert_close(k, x @ w_k.T, **TOL[dtype])
    torch.testing.assert_close(v, x @ w_v.T, **TOL[dtype])


def test_cached_step_first_token_returns_its_own_value() -> None:
    x = torch.tensor([[1.0, 2.0]])
    w_v = torch.tensor([[1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])  # (d_v=3, d_model=2)
    y, k, v = cached_attention_step(x, torch.eye(2), torch.eye(2), w_v, torch.zeros(1, 0, 2),
                                    torch.zeros(1, 0, 3))
    assert y.tolist() == [[1.0, -2.0, 3.0]] and v.tolist() == [[[1.0, -2.0, 3.0]]]


def test_error_cached_step_shapes() -> None:
    x, w = torch.zeros(2, 4), torch.zeros(3, 4)
    k, v = torch.zeros(2, 1, 3), torch.zeros(2, 1, 3)
    with pytest.raises(ValueError, match=r"x must be \(batch, d_model\)"):
        cached_attention_step(x[:, None], w, w, w, k, v)
    with pytest.raises(ValueError,
                       match=r"w_k must be \(out, d_model=4\) and is applied as x @ w_k.T"):
        cached_attention_step(x, w, w.T, w, k, v)
    with pytest.raises(ValueError, match=r"cache_v must be \(batch=2, t, 3\)"):
        cached_attention_step(x, w, w, w, k, torch.zeros(2, 1, 5))
    with pytest.raises(ValueError, match="the same number of tokens; got 1 and 2"):
        cached_attention_step(x, w, w, w, k, torch.zeros(2, 2, 3))
