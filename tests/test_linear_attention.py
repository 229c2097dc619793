"""Tests of course_lib.linear_attention: the kernel view, O(n) forms, the RNN step, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.linear_attention import (
    FEATURE_MAPS,
    causal_linear_attention,
    elu_feature_map,
    init_state,
    kernel_attention,
    linear_attention,
    linear_attention_step,
    recurrent_linear_attention,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
F64 = dict(rtol=1e-10, atol=1e-10)


def _qkv(seed: int, shape: tuple[int, ...], d_v: int, dtype: torch.dtype = torch.float64,
         device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.randn(*shape, generator=g, dtype=dtype)
    v = torch.randn(*shape[:-1], d_v, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


# ---- known answers -------------------------------------------------------------------------

def test_elu_feature_map_values_and_positivity() -> None:
    x = torch.tensor([-2.0, 0.0, 1.5], dtype=torch.float64)
    expected = torch.tensor([torch.exp(torch.tensor(-2.0, dtype=torch.float64)).item(), 1.0, 2.5],
                            dtype=torch.float64)
    torch.testing.assert_close(elu_feature_map(x), expected)
    wide = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 30
    torch.testing.assert_close(elu_feature_map(wide), F.elu(wide) + 1)
    assert (elu_feature_map(wide) > 0).all()  # F.elu(x) + 1 rounds to 0 in float32 for x < -17
    assert (F.elu(wide) + 1 == 0).any()


def test_elu_feature_map_gradient_is_finite() -> None:
    x = torch.tensor([-5.0, 0.5, 800.0], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(elu_feature_map(x).sum(), x)
    torch.testing.assert_close(grad, torch.tensor([torch.exp(torch.tensor(-5.0)).item(), 1.0, 1.0],
                                                  dtype=torch.float64))


def test_kernel_attention_by_hand() -> None:
    # phi = relu, q = (1, 0): similarities phi(q).phi(k_j) = 2 and 1 -> weights 2/3, 1/3.
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[2.0, 5.0], [1.0, -3.0]], dtype=torch.float64)
    v = torch.tensor([[3.0], [6.0]], dtype=torch.float64)
    out = kernel_attention(q, k, v, "relu")
    torch.testing.assert_close(out, torch.tensor([[2 / 3 * 3 + 1 / 3 * 6]], dtype=torch.float64))


def test_exp_feature_map_with_one_dimension_is_softmax() -> None:
    # With d = 1, exp(q) exp(k) = exp(q + k): not softmax(q k) in general, but for q = 0 the
    # weights are softmax(k) -- a check that the normalisation is the kernel's row sum.
    q = torch.zeros(1, 1, dtype=torch.float64)
    k = torch.randn(6, 1, dtype=torch.float64)
    v = torch.randn(6, 2, dtype=torch.float64)
    torch.testing.assert_close(kernel_attention(q, k, v, "exp"),
                               torch.softmax(k.T, -1) @ v, **F64)


# ---- the fast forms equal the quadratic one (float64, 1e-10) ------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("feature_map", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 3, 17, 8), (5, 4)])
def test_forms_equal_quadratic(device: str, feature_map: str, shape: tuple[int, ...]) -> None:
    q, k, v = _qkv(len(shape) * 10 + shape[-2], shape, d_v=5, device=device)
    torch.testing.assert_close(linear_attention(q, k, v, feature_map),
                               kernel_attention(q, k, v, feature_map), **F64)
    causal = kernel_attention(q, k, v, feature_map, causal=True)
    torch.testing.assert_close(causal_linear_attention(q, k, v, feature_map), causal, **F64)
    torch.testing.assert_close(recurrent_linear_attention(q, k, v, feature_map), causal, **F64)


def test_non_causal_with_different_lengths_and_callable_map() -> None:
    q, _, _ = _qkv(1, (2, 4, 6), 3)
    _, k, v = _qkv(2, (2, 9, 6), 3)

    def phi(x: torch.Tensor) -> torch.Tensor:  # a callable feature map
        return F.softplus(x)

    torch.testing.assert_close(linear_attention(q, k, v, phi), kernel_attention(q, k, v, phi),
                               **F64)


def test_gradients_equal_quadratic() -> None:
    q, k, v = (t.requires_grad_() for t in _qkv(3, (2, 11, 4), 3))
    a = torch.autograd.grad(causal_linear_attention(q, k, v).sum(), (q, k, v))
    b = torch.autograd.grad(kernel_attention(q, k, v, causal=True).sum(), (q, k, v))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **F64)


# ---- properties ------------------------------------------------------------------------------

def test_causal_output_ignores_the_future() -> None:
    q, k, v = _qkv(4, (1, 10, 4), 2)
    out = causal_linear_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, 6:] += 5.0
    v2[:, 6:] -= 3.0
    torch.testing.assert_close(causal_linear_attention(q, k2, v2)[:, :6], out[:, :6], **F64)


def test_weights_are_a_distribution() -> None:
    # Feeding one-hot values reads the weights out: rows non-negative and summing to one.
    q, k, _ = _qkv(5, (7, 3), 1)
    w = linear_attention(q, k, torch.eye(7, dtype=torch.float64))
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(7, dtype=torch.float64), **F64)


def test_zero_similarity_rows_give_zeros_not_nan() -> None:
    q = torch.tensor([[-1.0, -2.0], [1.0, 0.0]], dtype=torch.float64)  # relu(q_0) = 0
    k = torch.tensor([[1.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    for out in (linear_attention(q, k, v, "relu"), kernel_attention(q, k, v, "relu"),
                causal_linear_attention(q, k, v, "relu")):
        assert torch.isfinite(out).all() and out[0].item() == 0.0


def test_rnn_state_has_constant_size() -> None:
    q, k, v = _qkv(6, (3, 50, 4), 6)
    state = init_state(k[:, 0], v[:, 0])
    shapes = set()
    for t in range(50):
        _, state = linear_attention_step(state, q[:, t], k[:, t], v[:, t])
        shapes.add((tuple(state[0].shape), tuple(state[1].shape)))
    assert shapes == {((3, 4, 6), (3, 4))}


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    q, k, v = _qkv(7, (2, 5, 4), 3)
    with pytest.raises(ValueError, match=r"same feature size; got q \(2, 5, 4\) and k \(2, 5, 3\)"):
        linear_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match=r"same batch dimensions and length.*\(2, 4, 3\)"):
        kernel_attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match="as many queries as keys; got 3 and 5"):
        causal_linear_attention(q[:, :3], k, v)
    with pytest.raises(ValueError, match="unknown feature map 'softmax'"):
        linear_attention(q, k, v, "softmax")
    with pytest.raises(ValueError, match=r"state S \(2, 4, 2\)"):
        linear_attention_step(init_state(k[:, 0], v[:, 0, :2]), q[:, 0], k[:, 0], v[:, 0])
    with pytest.raises(ValueError, match="at least one position"):
        recurrent_linear_attention(q[:, :0], k[:, :0], v[:, :0])
