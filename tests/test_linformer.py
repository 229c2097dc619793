"""Tests of course_lib.linformer: projections, exactness at E = F = I, error vs k, spectra."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.linformer import (
    LinformerSelfAttention,
    approximation_error,
    cumulative_energy,
    energy_rank,
    linformer_attention,
    low_rank_error,
    random_projection,
    singular_values,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
F64 = dict(rtol=1e-10, atol=1e-10)


def _qkv(seed: int, n: int, d: int = 8, device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, n, d, generator=g, dtype=torch.float64).to(device) for _ in range(3)]


@pytest.mark.parametrize("device", DEVICES)
def test_identity_projection_is_exact_attention(device: str) -> None:
    q, k, v = _qkv(0, 12, device=device)
    eye = torch.eye(12, dtype=torch.float64, device=device)
    exact = torch.softmax(q @ k.mT / math.sqrt(8), -1) @ v
    torch.testing.assert_close(linformer_attention(q, k, v, eye, eye), exact, **F64)


@pytest.mark.parametrize("device", DEVICES)
def test_projection_is_attention_over_mixed_keys(device: str) -> None:
    # Known answer: E averages the keys in pairs, F picks the even values.
    q, k, v = _qkv(1, 6, device=device)
    e = torch.zeros(3, 6, dtype=torch.float64, device=device)
    f = torch.zeros_like(e)
    for r in range(3):
        e[r, 2 * r] = e[r, 2 * r + 1] = 0.5
        f[r, 2 * r] = 1.0
    k_mix = (k[:, 0::2] + k[:, 1::2]) / 2
    expected = torch.softmax(q @ k_mix.mT / math.sqrt(8), -1) @ v[:, 0::2]
    torch.testing.assert_close(linformer_attention(q, k, v, e, f), expected, **F64)


def test_random_projection_statistics() -> None:
    e = random_projection(256, 512, generator=torch.Generator().manual_seed(0),
                          dtype=torch.float64)
    assert e.shape == (256, 512)
    assert abs(e.var().item() - 1 / 256) < 0.05 / 256          # N(0, 1/k) entries
    x = torch.randn(512, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert abs((e @ x).norm().item() ** 2 / x.norm().item() ** 2 - 1) < 0.25  # JL: length kept


def test_error_decreases_with_k() -> None:
    q, k, v = (t[0] for t in _qkv(2, 128, d=16))
    linformer = approximation_error(q, k, v, [4, 64, 512], seed=0)
    assert linformer[0] > linformer[1] > linformer[2] > 0
    # Theorem 1's P R^T R V: unbiased, error ~ 1/sqrt(k), so 128x more rows cut it ~11x.
    jl = approximation_error(q, k, v, [4, 64, 512], method="jl", seed=0)
    assert jl[0] > jl[1] > jl[2] and jl[0] / jl[2] > 5 and jl[2] < 0.8


def test_spectrum_known_answers() -> None:
    p = torch.diag(torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(singular_values(p), torch.tensor([4.0, 2.0, 1.0],
                                                                dtype=torch.float64))
    torch.testing.assert_close(cumulative_energy(p),
                               torch.tensor([16 / 21, 20 / 21, 1.0], dtype=torch.float64))
    assert energy_rank(p, 0.9).item() == 2 and energy_rank(p, 0.75).item() == 1
    assert energy_rank(p, 20 / 21).item() == 2                  # exactly reached: no extra value
    torch.testing.assert_close(low_rank_error(p, 1), torch.tensor(math.sqrt(5 / 21),
                                                                  dtype=torch.float64))
    assert low_rank_error(p, 3).item() == 0.0


def test_eckart_young_against_truncated_svd() -> None:
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(4, 20, 20, generator=g, dtype=torch.float64) * 3, -1)
    u, s, vh = torch.linalg.svd(p)
    for r in (1, 5, 19):
        best = u[..., :r] @ torch.diag_embed(s[..., :r]) @ vh[..., :r, :]
        direct = torch.linalg.norm(p - best, dim=(-2, -1)) / torch.linalg.norm(p, dim=(-2, -1))
        torch.testing.assert_close(low_rank_error(p, r), direct, **F64)
    ranks = energy_rank(p, 0.9)
    assert ranks.shape == (4,) and ((ranks >= 1) & (ranks <= 20)).all()
    c = cumulative_energy(p)
    assert (c[torch.arange(4), ranks - 1] >= 0.9 - 1e-12).all()
    assert (ranks == 1).logical_or(c[torch.arange(4), (ranks - 2).clamp(min=0)] < 0.9).all()


def test_uniform_attention_has_rank_one() -> None:
    # Every row the same distribution: a rank-one matrix, all energy in one value.
    p = torch.full((16, 16), 1 / 16, dtype=torch.float64)
    assert energy_rank(p, 0.99).item() == 1


@pytest.mark.parametrize("device", DEVICES)
def test_module_shapes_and_gradients(device: str) -> None:
    torch.manual_seed(0)
    attn = LinformerSelfAttention(d_model=16, n_heads=4, seq_len=20, k=5).to(device)
    x = torch.randn(3, 20, 16, device=device)
    out = attn(x)
    assert out.shape == (3, 20, 16)
    out.sum().backward()
    assert attn.e.grad is not None and attn.e.grad.shape == (5, 20)


def test_errors_name_the_problem() -> None:
    q, k, v = _qkv(4, 10)
    e = torch.randn(3, 10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(k_proj, n\) with n = 10.*e \(3, 9\)"):
        linformer_attention(q, k, v, e[:, :9], e)
    with pytest.raises(ValueError, match=r"same k_proj; got \(3, 10\) and \(2, 10\)"):
        linformer_attention(q, k, v, e, e[:2])
    with pytest.raises(ValueError, match=r"do not fit.*\(2, 10, 8\), \(2, 10, 8\), \(2, 9, 8\)"):
        linformer_attention(q, k, v[:, :9], e, e)
    with pytest.raises(ValueError, match="fraction must be in"):
        energy_rank(torch.eye(3), 1.5)
    with pytest.raises(ValueError, match="seq_len=20"):
        LinformerSelfAttention(8, 2, seq_len=20, k=4)(torch.randn(1, 19, 8))
    with pytest.raises(ValueError, match="not divisible by n_heads=3"):
        LinformerSelfAttention(8, 3, seq_len=20, k=4)
    with pytest.raises(ValueError, match="method must be 'linformer' or 'jl'"):
        approximation_error(q[0], k[0], v[0], [2], method="svd")
    with pytest.raises(ValueError, match="need k > 0"):
        random_projection(0, 5)
