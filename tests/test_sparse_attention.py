"""Tests of course_lib.sparse_attention: patterns, graphs, receptive fields, block-sparse
attention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.sparse_attention import (
    block_layout,
    block_sparse_attention,
    dense_mask,
    dilated_window,
    edges_to_mask,
    global_tokens,
    mask_to_edges,
    random_blocks,
    receptive_field,
    sliding_window,
    union,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _brute(n: int, rule: Callable[[int, int], bool]) -> torch.Tensor:
    """The pattern written out pair by pair, as its definition reads."""
    return torch.tensor([[bool(rule(i, j)) for j in range(n)] for i in range(n)])


# ---- known answers: each pattern against its definition, pair by pair ---------------------

@pytest.mark.parametrize("w,causal", [(0, False), (2, False), (3, True)])
def test_sliding_window_definition(w: int, causal: bool) -> None:
    rule = (lambda i, j: 0 <= i - j <= w) if causal else (lambda i, j: abs(i - j) <= w)
    assert torch.equal(dense_mask(sliding_window(w, causal), 11), _brute(11, rule))


@pytest.mark.parametrize("w,r,causal", [(1, 2, False), (2, 3, True), (3, 1, False)])
def test_dilated_window_definition(w: int, r: int, causal: bool) -> None:
    def rule(i: int, j: int) -> bool:
        gap = i - j
        return abs(gap) <= w * r and gap % r == 0 and (gap >= 0 or not causal)
    assert torch.equal(dense_mask(dilated_window(w, r, causal), 13), _brute(13, rule))


def test_global_tokens_definition() -> None:
    assert torch.equal(dense_mask(global_tokens([0, 5]), 7),
                       _brute(7, lambda i, j: i in (0, 5) or j in (0, 5)))


def test_random_blocks_layout() -> None:
    mask = dense_mask(random_blocks(12, block_size=3, n_random=2, seed=4), 12)
    blocks = mask.view(4, 3, 4, 3)
    # Whole blocks are on or off, and every query block sees exactly n_random key blocks.
    assert torch.equal(blocks.all(3).all(1), blocks.any(3).any(1))
    assert blocks.any(3).any(1).sum(1).tolist() == [2, 2, 2, 2]
    again = dense_mask(random_blocks(12, block_size=3, n_random=2, seed=4), 12)
    assert torch.equal(mask, again)  # the seed fixes the draw
    state = torch.random.get_rng_state()
    random_blocks(12, 3, 2, seed=5)
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is untouched


def test_union_is_bigbird() -> None:
    pat = union(sliding_window(1), global_tokens([0]), random_blocks(8, 2, 1, seed=0))
    expected = (dense_mask(sliding_window(1), 8) | dense_mask(global_tokens([0]), 8)
                | dense_mask(random_blocks(8, 2, 1, seed=0), 8))
    assert torch.equal(dense_mask(pat, 8), expected)


def test_edges_round_trip() -> None:
    mask = dense_mask(union(dilated_window(2, 2), global_tokens([3])), 10)
    edges = mask_to_edges(mask)
    assert edges.shape == (2, int(mask.sum()))
    assert all(mask[i, j] for i, j in edges.T.tolist())
    assert torch.equal(edges_to_mask(edges, 10, 10), mask)


# ---- receptive fields ----------------------------------------------------------------------

@pytest.mark.parametrize("layers", [1, 2, 3, 5])
@pytest.mark.parametrize("w", [1, 2])
def test_receptive_field_grows_linearly(layers: int, w: int) -> None:
    n = 41
    field = receptive_field(dense_mask(sliding_window(w), n), layers)
    assert field[n // 2].sum().item() == 2 * layers * w + 1     # the middle query
    causal = receptive_field(dense_mask(sliding_window(w, causal=True), n), layers)
    assert causal[n - 1].sum().item() == layers * w + 1


def test_dilated_receptive_field_spans_further_with_gaps() -> None:
    n, w, r, layers = 61, 2, 3, 3
    row = receptive_field(dense_mask(dilated_window(w, r), n), layers)[30]
    seen = row.nonzero().flatten() - 30
    assert seen.min().item() == -layers * w * r and seen.max().item() == layers * w * r
    assert (seen % r == 0).all()                                # only every r-th position


def test_global_token_connects_everything_in_two_layers() -> None:
    mask = dense_mask(union(sliding_window(1), global_tokens([0])), 30)
    assert not receptive_field(mask, 1).all()
    assert receptive_field(mask, 2).all()


# ---- block-sparse attention equals dense masked attention ----------------------------------

PATTERNS = {
    "window": lambda n: sliding_window(3),
    "causal window": lambda n: sliding_window(5, causal=True),
    "dilated": lambda n: dilated_window(2, 3),
    "bigbird": lambda n: union(sliding_window(2), global_tokens([0, n - 1]),
                               random_blocks(n, 4, 2, seed=1)),
    # Every fifth query (from 3 on) may attend to nothing: its output must be zeros.
    "empty rows": lambda n: (lambda i, j: (j <= i) & (i % 5 != 3) & (i - j < 4)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(PATTERNS))
@pytest.mark.parametrize("n,block", [(32, 4), (30, 8), (5, 8)])
def test_block_sparse_equals_dense(device: str, dtype: torch.dtype, name: str, n: int,
                                   block: int) -> None:
    pat = PATTERNS[name](n)
    g = torch.Generator().manual_seed(n + block)
    q, k = (torch.randn(2, 3, n, 8, generator=g, dtype=dtype).to(device) for _ in range(2))
    v = torch.randn(2, 3, n, 5, generator=g, dtype=dtype).to(device)
    out = block_sparse_attention(q, k, v, pat, block)
    mask = dense_mask(pat, n, device)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask), **TOL[dtype])
    empty = ~mask.any(-1)
    assert out[..., empty, :].abs().sum().item() == 0.0        # no allowed key: zeros


def test_block_sparse_gradients_equal_dense() -> None:
    n, pat = 24, union(sliding_window(2), global_tokens([5]))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 4, generator=g, dtype=torch.float64).requires_grad_()
               for _ in range(3))
    a = torch.autograd.grad(block_sparse_attention(q, k, v, pat, 8).sum(), (q, k, v))
    b = torch.autograd.grad(scaled_dot_product_attention(q, k, v, dense_mask(pat, n)).sum(),
                            (q, k, v))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **TOL[torch.float64])


def test_block_sparse_computes_only_allowed_blocks() -> None:
    # Count the scores computed through the saved tensors: T * (blocks per row) * b, not T^2.
    n, b = 256, 16
    pat = sliding_window(8)
    layout = block_layout(pat, n, b)
    assert layout.sum(1).max().item() == 3                       # a window spans 3 blocks
    q = torch.randn(1, n, 4, requires_grad=True)
    sizes: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t,
                                                  lambda t: t):
        block_sparse_attention(q, q, q, pat, b, layout=layout)
    assert max(sizes) <= n * 3 * b < n * n // 5


def test_block_layout_matches_dense_mask() -> None:
    pat = union(dilated_window(2, 4), global_tokens([9]))
    n, b = 37, 5
    dense = dense_mask(pat, n)
    padded = torch.zeros(40, 40, dtype=torch.bool)
    padded[:n, :n] = dense
    assert torch.equal(block_layout(pat, n, b), padded.view(8, 5, 8, 5).any(3).any(1))


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    x = torch.randn(1, 8, 4)
    with pytest.raises(ValueError, match=r"self-attention.*q \(1, 8, 4\), k \(1, 6, 4\)"):
        block_sparse_attention(x, x[:, :6], x[:, :6], sliding_window(1), 4)
    with pytest.raises(ValueError, match=r"layout must be boolean \(2, 2\) for T=8"):
        block_sparse_attention(x, x, x, sliding_window(1), 4, layout=torch.ones(3, 3).bool())
    with pytest.raises(ValueError, match="block_size must be positive"):
        block_sparse_attention(x, x, x, sliding_window(1), 0)
    with pytest.raises(ValueError, match="window >= 0 and dilation >= 1"):
        dilated_window(2, 0)
    with pytest.raises(ValueError, match="n_random=5 must be between 0 and the 4 key blocks"):
        random_blocks(8, 2, 5)
    with pytest.raises(ValueError, match=r"square boolean \(n, n\)"):
        receptive_field(torch.ones(3, 4, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="n_layers must be at least 1"):
        receptive_field(torch.ones(3, 3, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match=r"edges must be \(2, E\)"):
        edges_to_mask(torch.zeros(3, 4, dtype=torch.long), 4, 4)
    with pytest.raises(ValueError, match="at least one pattern"):
        union()
