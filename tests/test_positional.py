"""Tests of course_lib.positional: known values, the relative-position linear map, modules,
and what positions do to a model's permutation symmetry."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.multihead import MultiHeadAttention
from course_lib.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    frequencies,
    relative_position_map,
    sinusoidal_encoding,
)

pytestmark = pytest.mark.ch02

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_known_values_by_hand() -> None:
    pe = sinusoidal_encoding(3, 4, dtype=torch.float64)
    # omega = (1, 10000^(-2/4) = 0.01)
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                             [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]],
                            dtype=torch.float64)
    torch.testing.assert_close(pe, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(frequencies(6), torch.tensor([1.0, 10000 ** (-2 / 6),
                                                             10000 ** (-4 / 6)],
                                                            dtype=torch.float64))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shape_dtype_device_follow(device: str, dtype: torch.dtype) -> None:
    pe = sinusoidal_encoding(7, 10, dtype=dtype, device=device)
    assert pe.shape == (7, 10) and pe.dtype == dtype and pe.device.type == device
    m = relative_position_map(2, 10, dtype=dtype, device=device)
    assert m.shape == (10, 10) and m.dtype == dtype and m.device.type == device


def test_float32_table_is_the_rounded_float64_table() -> None:
    pe32 = sinusoidal_encoding(1000, 16)
    pe64 = sinusoidal_encoding(1000, 16, dtype=torch.float64)
    assert torch.equal(pe32, pe64.float())


@pytest.mark.parametrize("shift", [0, 1, 7, -5, 40])
@pytest.mark.parametrize("d_model", [2, 8, 64])
def test_shift_is_one_linear_map_for_every_position(shift: int, d_model: int) -> None:
    pe = sinusoidal_encoding(200, d_model, dtype=torch.float64)
    m = relative_position_map(shift, d_model, dtype=torch.float64)
    lo, hi = max(0, -shift), min(200, 200 - shift)
    ts = torch.arange(lo, hi)
    torch.testing.assert_close(pe[ts] @ m.T, pe[ts + shift], rtol=0, atol=1e-10)


def test_relative_map_is_a_rotation_group() -> None:
    d = 16
    m = {s: relative_position_map(s, d, dtype=torch.float64) for s in (-3, 0, 2, 5, 7)}
    eye = torch.eye(d, dtype=torch.float64)
    torch.testing.assert_close(m[0], eye)
    torch.testing.assert_close(m[2] @ m[5], m[7])
    torch.testing.assert_close(m[5] @ m[5].T, eye)        # orthogonal: distances are kept
    torch.testing.assert_close(m[-3], relative_position_map(3, d, dtype=torch.float64).T)
    torch.testing.assert_close(relative_position_map(-3, d, dtype=torch.float64) @ m[2]
                               @ relative_position_map(1, d, dtype=torch.float64), eye)


def test_dot_products_depend_on_the_offset_only() -> None:
    pe = sinusoidal_encoding(100, 32, dtype=torch.float64)
    gram = pe @ pe.T
    for s in (1, 4, 9):
        diagonal = torch.diagonal(gram, offset=s)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_dot_products_are_a_sum_of_cosines_that_oscillates() -> None:
    """PE_t . PE_(t+s) = sum_i cos(omega_i s): largest at s = 0, but not monotone in |s|."""
    d = 64
    pe = sinusoidal_encoding(256, d, dtype=torch.float64)
    similarity = pe @ pe[0]
    s = torch.arange(256, dtype=torch.float64)
    expected = torch.cos(s[:, None] * frequencies(d)[None, :]).sum(-1)
    torch.testing.assert_close(similarity, expected)
    assert similarity[0] == d / 2 and (similarity[1:] < d / 2).all()
    assert (similarity[1:] > similarity[:-1]).any(), "it rises again somewhere: not monotone"


def test_odd_d_model_is_an_error() -> None:
    with pytest.raises(ValueError, match="d_model must be a positive even number; got d_model=5"):
        sinusoidal_encoding(4, 5)
    with pytest.raises(ValueError, match="d_model=3"):
        relative_position_map(1, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("module_cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_modules_add_positions_and_follow_dtype_device(device: str, module_cls: type) -> None:
    torch.manual_seed(0)
    pos = module_cls(8, max_len=12).to(device).double()
    x = torch.zeros(3, 5, 8, dtype=torch.float64, device=device)
    y = pos(x)
    assert y.shape == x.shape and y.dtype == torch.float64 and y.device.type == device
    assert torch.equal(y[0], y[1])                  # the same for every sequence
    assert not torch.equal(y[:, 0], y[:, 1])        # different for every position
    if module_cls is SinusoidalPositionalEncoding:
        torch.testing.assert_close(y[0], sinusoidal_encoding(5, 8, dtype=torch.float64,
                                                             device=device))
        assert "pe" not in pos.state_dict()
    with pytest.raises(ValueError, match="sequence length 13 exceeds max_len=12"):
        pos(torch.zeros(1, 13, 8, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="d_model=8"):
        pos(torch.zeros(1, 3, 6, dtype=torch.float64, device=device))


def test_learned_embedding_is_trainable() -> None:
    pos = LearnedPositionalEmbedding(4, max_len=6)
    assert sum(p.numel() for p in pos.parameters()) == 24
    pos(torch.zeros(1, 3, 4)).sum().backward()
    grad = pos.embedding.weight.grad
    assert (grad[:3] != 0).all() and (grad[3:] == 0).all()


def _permuted_outputs(add_positions: torch.nn.Module | None) -> tuple[torch.Tensor, torch.Tensor,
                                                                      torch.Tensor]:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 9, 16)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))

    def model(tokens: torch.Tensor) -> torch.Tensor:
        h = tokens if add_positions is None else add_positions(tokens)
        return mha(h, h, h)[0]

    return model(x), model(x[:, perm]), perm


def test_without_positions_attention_is_permutation_equivariant() -> None:
    out, out_perm, perm = _permuted_outputs(None)
    torch.testing.assert_close(out_perm, out[:, perm], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module_cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_positions_break_the_symmetry(module_cls: type) -> None:
    torch.manual_seed(0)
    pos = module_cls(16, max_len=9)
    if isinstance(pos, LearnedPositionalEmbedding):
        torch.nn.init.normal_(pos.embedding.weight)
    out, out_perm, perm = _permuted_outputs(pos)
    assert (out_perm - out[:, perm]).abs().max() > 1e-2
