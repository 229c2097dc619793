"""Tests of course_lib.tiled_attention: online softmax, tiled attention against SDPA, memory."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.tiled_attention import (
    TiledAttentionFunction,
    naive_attention,
    online_softmax,
    online_softmax_update,
    tiled_attention,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _qkv(seed: int, batch: tuple[int, ...], t_q: int, t_k: int, d: int, d_v: int,
         dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(*batch, t_q, d), (*batch, t_k, d), (*batch, t_k, d_v)]
    return [torch.randn(*s, generator=g, dtype=dtype).to(device).requires_grad_() for s in shapes]


# ---- known answers -------------------------------------------------------------------------

def test_online_softmax_update_by_hand() -> None:
    m, l = torch.tensor(float("-inf")), torch.tensor(0.0, dtype=torch.float64)
    m, l = online_softmax_update(m.double(), l, torch.tensor([1.0, 2.0], dtype=torch.float64))
    assert m.item() == 2.0 and l.item() == pytest.approx(math.exp(-1) + 1)
    m, l = online_softmax_update(m, l, torch.tensor([4.0], dtype=torch.float64))
    # The old sum is rescaled by exp(2 - 4) when the maximum moves to 4.
    assert m.item() == 4.0 and l.item() == pytest.approx((math.exp(-1) + 1) * math.exp(-2) + 1)


def test_online_softmax_update_ignores_masked_scores() -> None:
    m = torch.full((2,), float("-inf"))
    l = torch.zeros(2)
    scores = torch.tensor([[float("-inf")] * 3, [0.0, float("-inf"), 0.0]])
    m, l = online_softmax_update(m, l, scores)
    assert m.tolist() == [float("-inf"), 0.0] and l.tolist() == [0.0, 2.0]


def test_tiled_attention_known_answer() -> None:
    # One query, two keys with scores 0 and log 3 (scale 1): weights 1/4 and 3/4.
    q = torch.tensor([[[1.0]]], dtype=torch.float64)
    k = torch.tensor([[[0.0], [math.log(3)]]], dtype=torch.float64)
    v = torch.tensor([[[4.0], [8.0]]], dtype=torch.float64)
    out = tiled_attention(q, k, v, scale=1.0, block_q=1, block_k=1)
    assert out.item() == pytest.approx(0.25 * 4 + 0.75 * 8, abs=1e-12)


# ---- properties ----------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_online_softmax_equals_softmax(block: int) -> None:
    s = torch.randn(4, 29, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 10
    torch.testing.assert_close(online_softmax(s, block), torch.softmax(s, -1), rtol=0, atol=1e-14)


def test_online_softmax_fully_masked_row_is_zero() -> None:
    s = torch.tensor([[float("-inf")] * 4, [1.0, float("-inf"), 1.0, 1.0]])
    w = online_softmax(s, 3)
    assert w[0].tolist() == [0.0] * 4
    assert w[1, 1].item() == 0.0 and w[1].sum().item() == pytest.approx(1.0)


def test_fully_masked_rows_give_zeros_and_zero_gradients() -> None:
    q, k, v = _qkv(2, (2,), 6, 9, 4, 3, torch.float64, "cpu")
    mask = torch.rand(6, 9, generator=torch.Generator().manual_seed(0)) < 0.5
    mask[:, 0] = True
    mask[2] = False
    out = tiled_attention(q, k, v, mask=mask, block_q=4, block_k=4)
    assert torch.isfinite(out).all() and out[:, 2].abs().max().item() == 0.0
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert dq[:, 2].abs().max().item() == 0.0
    ref = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    gr = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip((dq, dk, dv), gr):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_saves_no_quadratic_tensor() -> None:
    # What autograd keeps for backward: q, k, v, the output and the (B, H, T) log-sum-exp.
    q, k, v = _qkv(3, (1, 2), 96, 96, 8, 8, torch.float32, "cpu")
    saved: list[torch.Size] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        tiled_attention(q, k, v, causal=True, block_q=32, block_k=32)
    assert saved and all(math.prod(s) < 96 * 96 for s in saved)  # nothing T_q x T_k
    assert torch.Size((1, 2, 96)) in saved  # the log-sum-exp
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        naive_attention(q, k, v, causal=True)
    assert torch.Size((1, 2, 96, 96)) in saved  # the naive path keeps the weights


# ---- peer: torch.nn.functional.scaled_dot_product_attention -------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t_q,t_k,blocks", [(33, 33, (8, 16)), (17, 40, (5, 7)), (1, 1, (4, 4)),
                                            (64, 64, (64, 64))])
def test_equals_sdpa_values_and_gradients(device: str, dtype: torch.dtype, causal: bool,
                                          t_q: int, t_k: int, blocks: tuple[int, int]) -> None:
    q, k, v = _qkv(t_q * 100 + t_k, (2, 3), t_q, t_k, 8, 5, dtype, device)
    d_out = torch.randn(2, 3, t_q, 5, generator=torch.Generator().manual_seed(9),
                        dtype=dtype).to(device)
    out = tiled_attention(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
    if causal and t_q == t_k:
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # bottom-right aligned causal mask (course_lib.causal_mask) when T_q < T_k
        mask = causal_mask(t_q, device, n_keys=t_k) if causal else None
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    for a, b in zip(torch.autograd.grad(out, (q, k, v), d_out),
                    torch.autograd.grad(ref, (q, k, v), d_out)):
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_custom_scale_and_broadcast_batch(device: str) -> None:
    q, _, _ = _qkv(4, (2, 3), 10, 10, 4, 4, torch.float64, device)
    _, k, v = _qkv(5, (1, 3), 10, 12, 4, 6, torch.float64, device)  # k, v broadcast over batch
    out = tiled_attention(q, k, v, scale=0.3, block_q=4, block_k=5)
    ref = F.scaled_dot_product_attention(q, k.expand(2, 3, 12, 4), v.expand(2, 3, 12, 6),
                                         scale=0.3)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    g = torch.autograd.grad(out.sum(), (k, v))
    g_ref = torch.autograd.grad(ref.sum(), (k, v))
    for a, b in zip(g, g_ref):
        assert a.shape == (1, 3, 12, a.shape[-1])
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_gradcheck_float64() -> None:
    q, k, v = _qkv(6, (1,), 5, 7, 3, 2, torch.float64, "cpu")
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, causal=True, block_q=2, block_k=3), (q, k, v))


def test_naive_equals_sdpa() -> None:
    q, k, v = _qkv(7, (2,), 9, 9, 4, 4, torch.float64, "cpu")
    torch.testing.assert_close(naive_attention(q, k, v, causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               **TOL[torch.float64])


def test_is_an_autograd_function() -> None:
    q, k, v = _qkv(8, (1,), 4, 4, 2, 2, torch.float32, "cpu")
    out = tiled_attention(q, k, v)
    assert type(out.grad_fn).__name__ == "TiledAttentionFunctionBackward"
    assert issubclass(TiledAttentionFunction, torch.autograd.Function)


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match=r"same feature size d.*\(1, 4, 8\).*\(1, 4, 6\)"):
        tiled_attention(q, torch.randn(1, 4, 6), torch.randn(1, 4, 6))
    with pytest.raises(ValueError, match=r"k \(1, 5, 8\) and v \(1, 4, 8\)"):
        tiled_attention(q, torch.randn(1, 5, 8), torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="T_q <= T_k; got T_q=4, T_k=2"):
        tiled_attention(q, torch.randn(1, 2, 8), torch.randn(1, 2, 8), causal=True)
    with pytest.raises(TypeError, match="boolean"):
        tiled_attention(q, q, q, mask=torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast"):
        tiled_attention(q, q, q, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="floating dtype"):
        tiled_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="block sizes must be positive"):
        tiled_attention(q, q, q, block_q=0)
    with pytest.raises(ValueError, match="must be the shape of scores"):
        online_softmax_update(torch.zeros(2), torch.zeros(3), torch.zeros(2, 5))
