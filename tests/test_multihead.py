"""Tests of course_lib.multihead: split/merge, the functional form, and the peer
``torch.nn.MultiheadAttention`` with copied weights (its boolean masks mean True = NOT allowed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.attention import attention_mask, causal_mask, padding_mask
from course_lib.multihead import MultiHeadAttention, merge_heads, multi_head_attention, split_heads

pytestmark = pytest.mark.ch02

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _pair(d: int, h: int, dtype: torch.dtype, device: str, bias: bool = True,
          impl: str = "fast") -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(d, h, bias=bias, batch_first=True).to(device, dtype).eval()
    with torch.no_grad():  # random biases: torch initialises them to zero
        if bias:
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention(d, h, bias=bias, impl=impl).to(device, dtype).eval()
    w_q, w_k, w_v = theirs.in_proj_weight.detach().chunk(3)
    with torch.no_grad():
        for proj, w in ((ours.q_proj, w_q), (ours.k_proj, w_k), (ours.v_proj, w_v)):
            proj.weight.copy_(w)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        if bias:
            for proj, b in zip((ours.q_proj, ours.k_proj, ours.v_proj),
                               theirs.in_proj_bias.detach().chunk(3)):
                proj.bias.copy_(b)
            ours.out_proj.bias.copy_(theirs.out_proj.bias)
    return ours, theirs


def _inputs(seed: int, B: int, t_q: int, t_k: int, d: int, dtype: torch.dtype, device: str):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, t, d, generator=g, dtype=dtype).to(device)
                 for t in (t_q, t_k, t_k))


# ---- split and merge -----------------------------------------------------------------------

def test_split_heads_known_answer_and_round_trip() -> None:
    x = torch.arange(12.0).view(1, 2, 6)  # two positions, six features
    heads = split_heads(x, 3)
    assert heads.shape == (1, 3, 2, 2)
    assert heads[0, 1].tolist() == [[2.0, 3.0], [8.0, 9.0]]  # head 1: features 2 and 3
    torch.testing.assert_close(merge_heads(heads), x)


def test_projecting_then_splitting_equals_per_head_projections() -> None:
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 5, 8, generator=g), torch.randn(8, 8, generator=g)  # w: (out, in)
    heads = split_heads(x @ w.T, 4)
    for i in range(4):
        torch.testing.assert_close(heads[:, i], x @ w[2 * i:2 * i + 2].T)  # head i: rows of w


def test_split_and_merge_errors() -> None:
    with pytest.raises(ValueError, match="feature size 6 is not divisible by n_heads=4"):
        split_heads(torch.zeros(1, 2, 6), 4)
    with pytest.raises(ValueError, match="expects \\(batch, length, features\\)"):
        split_heads(torch.zeros(2, 6), 2)
    with pytest.raises(ValueError, match="expects \\(batch, heads, length, d_head\\)"):
        merge_heads(torch.zeros(2, 3, 4))


# ---- peer equivalence with torch.nn.MultiheadAttention -------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("masks", ["none", "key padding", "attn mask", "both"])
def test_matches_torch_multihead_attention(device: str, dtype: torch.dtype, impl: str,
                                           masks: str) -> None:
    B, t_q, t_k, d, h = 3, 5, 7, 16, 4
    ours, theirs = _pair(d, h, dtype, device, impl=impl)
    q, k, v = _inputs(0, B, t_q, t_k, d, dtype, device)
    real = padding_mask(torch.tensor([7, 3, 5], device=device), t_k)  # True = real key
    allowed = causal_mask(t_q, device, n_keys=t_k)                      # True = may attend
    use_pad, use_attn = masks in ("key padding", "both"), masks in ("attn mask", "both")
    expected, _ = theirs(q, k, v, need_weights=False,
                         key_padding_mask=~real if use_pad else None,  # torch: True = padding
                         attn_mask=~allowed if use_attn else None)     # torch: True = blocked
    mask = attention_mask(real if use_pad else None, allowed if use_attn else None)
    out, weights = ours(q, k, v, mask)
    assert weights is None
    torch.testing.assert_close(out, expected, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_weights_match_torch_per_head(device: str, dtype: torch.dtype) -> None:
    B, T, d, h = 2, 6, 12, 3
    ours, theirs = _pair(d, h, dtype, device)
    x, _, _ = _inputs(1, B, T, T, d, dtype, device)
    real = padding_mask(torch.tensor([6, 4], device=device))
    expected_out, expected_w = theirs(x, x, x, key_padding_mask=~real, need_weights=True,
                                      average_attn_weights=False)
    out, w = ours(x, x, x, attention_mask(real), need_weights=True)
    assert w.shape == (B, h, T, T)
    torch.testing.assert_close(w, expected_w, **TOL[dtype])
    torch.testing.assert_close(out, expected_out, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_bias_matches_torch(dtype: torch.dtype) -> None:
    ours, theirs = _pair(8, 2, dtype, "cpu", bias=False)
    q, k, v = _inputs(2, 2, 3, 4, 8, dtype, "cpu")
    torch.testing.assert_close(ours(q, k, v)[0], theirs(q, k, v)[0], **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_match_torch(dtype: torch.dtype) -> None:
    ours, theirs = _pair(8, 2, dtype, "cpu")
    q, k, v = _inputs(3, 2, 4, 4, 8, dtype, "cpu")
    ours(q, k, v)[0].square().sum().backward()
    theirs(q, k, v)[0].square().sum().backward()
    w_q, _, _ = theirs.in_proj_weight.grad.chunk(3)
    torch.testing.assert_close(ours.q_proj.weight.grad, w_q, **TOL[dtype])
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad,
                               **TOL[dtype])


# ---- the functional form, masks, properties --------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_form_equals_the_module_without_bias(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, bias=False).to(dtype)
    q, k, v = _inputs(4, 2, 4, 5, 12, dtype, "cpu")
    mask = padding_mask(torch.tensor([5, 2]))[:, None, None, :]
    expected, expected_w = mha(q, k, v, mask, need_weights=True)
    out, w = multi_head_attention(q, k, v, mha.q_proj.weight, mha.k_proj.weight,
                                  mha.v_proj.weight, mha.out_proj.weight, 3, mask)
    torch.testing.assert_close(out, expected, **TOL[dtype])
    torch.testing.assert_close(w, expected_w, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_form_matches_torch_with_non_square_weights(dtype: torch.dtype) -> None:
    """Cross-attention to a memory of another width (torch's kdim, vdim): every weight is random,
    non-symmetric and, for keys and values, non-square, so a transposed weight cannot pass."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, bias=False, kdim=6, vdim=5, batch_first=True).to(dtype)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 4, 8, generator=g, dtype=dtype)
    k, v = torch.randn(3, 7, 6, generator=g, dtype=dtype), torch.randn(3, 7, 5, generator=g,
                                                                         dtype=dtype)
    real = padding_mask(torch.tensor([7, 1, 4]), 7)                    # True = real key
    expected, expected_w = theirs(q, k, v, key_padding_mask=~real,    # torch: True = padding
                                  average_attn_weights=False)
    with torch.no_grad():
        out, w = multi_head_attention(q, k, v, theirs.q_proj_weight, theirs.k_proj_weight,
                                      theirs.v_proj_weight, theirs.out_proj.weight, 2,
                                      real[:, None, None, :])
    torch.testing.assert_close(out, expected, **TOL[dtype])
    torch.testing.assert_close(w, expected_w, **TOL[dtype])


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_fully_masked_query_gives_the_output_bias_and_finite_gradients(impl: str) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, impl=impl)
    x = torch.randn(2, 4, 8, requires_grad=True)
    mask = causal_mask(4)[None, None].repeat(2, 1, 1, 1)
    mask[1, 0, 2] = False
    out, _ = mha(x, x, x, mask)
    torch.testing.assert_close(out[1, 2], mha.out_proj.bias.detach())
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_self_attention_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    out, _ = mha(x, x, x)
    out_perm, _ = mha(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(1, 6, 8)
    mha.eval()
    a, b = mha(x, x, x)[0], mha(x, x, x)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    mha.train()
    assert not torch.equal(mha(x, x, x)[0], a)


def test_errors_name_the_numbers() -> None:
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="impl must be"):
        MultiHeadAttention(8, 2, impl="flash")  # type: ignore[arg-type]
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="key and value must have the same length; got 3 .* 4"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"query must have shape \(batch, length, d_model=8\)"):
        mha(torch.randn(2, 3, 6), x, x)
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, x, x, torch.ones(2, 3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"w_k must have shape \(8, 8\) \(out, in\)"):
        multi_head_attention(x, x, x, torch.eye(8), torch.eye(4), torch.eye(8), torch.eye(8), 2)
    with pytest.raises(ValueError, match=r"w_o must have shape \(d_out, 8\)"):
        multi_head_attention(x, x, x, torch.eye(8), torch.eye(8), torch.eye(8), torch.eye(4), 2)
