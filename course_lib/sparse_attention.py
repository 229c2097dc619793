r"""Sparse attention patterns (Longformer, BigBird) and a block-sparse attention that skips blocks.

Taught in chapter 6, section 2. Beltagy et al. (2020), "Longformer", let each token attend to a
sliding window of neighbours, optionally dilated, plus a few global tokens that attend to and are
attended by everyone; Zaheer et al. (2020), "Big Bird", add random blocks of keys. Each pattern is
a *mask function* ``f(i, j) -> bool`` of query and key positions (broadcasting tensors), so the
same pattern gives a dense ``(n, n)`` mask (:func:`dense_mask`, ``True`` = may attend), a graph
(:func:`mask_to_edges`), and the block layout that :func:`block_sparse_attention` uses to compute
only the blocks that hold allowed pairs:

.. math:: O_i = \sum_{j \in N(i)} \frac{e^{s_{ij}}}{\sum_{j' \in N(i)} e^{s_{ij'}}}\, v_j, \qquad
          N(i) = \{j : f(i, j)\}

With a window of ``w`` keys on each side, one layer sees ``2w + 1`` positions; ``L`` layers see
``2Lw + 1`` (the receptive field grows linearly with depth, and with the dilation ``r``:
``2Lwr + 1`` positions spanned), :func:`receptive_field`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from course_lib.attention import masked_softmax
from course_lib.checks import (
    check_bool_tensor,
    check_float_tensor,
    check_ids,
    check_int_tensor,
    check_same_dtype,
)

MaskFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (query pos, key pos) -> allowed


def sliding_window(window: int, causal: bool = False) -> MaskFn:
    """Each query sees the keys within ``window`` positions on each side (or before it, if causal).

    Example:
        >>> dense_mask(sliding_window(1), 4).int()
        tensor([[1, 1, 0, 0],
                [1, 1, 1, 0],
                [0, 1, 1, 1],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    return dilated_window(window, 1, causal)


def dilated_window(window: int, dilation: int, causal: bool = False) -> MaskFn:
    """``window`` keys on each side, ``dilation`` positions apart: ``|i - j| = r m``, ``m <= w``.

    Example:
        >>> dense_mask(dilated_window(1, 2, causal=True), 5).int()
        tensor([[1, 0, 0, 0, 0],
                [0, 1, 0, 0, 0],
                [1, 0, 1, 0, 0],
                [0, 1, 0, 1, 0],
                [0, 0, 1, 0, 1]], dtype=torch.int32)
    """
    if window < 0 or dilation < 1:
        raise ValueError(f"need window >= 0 and dilation >= 1, got window={window}, "
                         f"dilation={dilation}")

    def allowed(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        gap = i - j
        near = (gap.abs() <= window * dilation) & (gap % dilation == 0)
        return near & (gap >= 0) if causal else near

    return allowed


def global_tokens(indices: Sequence[int]) -> MaskFn:
    """The tokens at ``indices`` attend to every position and every position attends to them.

    Example:
        >>> dense_mask(global_tokens([0]), 3).int()
        tensor([[1, 1, 1],
                [1, 0, 0],
                [1, 0, 0]], dtype=torch.int32)
    """
    # kept on the CPU and moved to the positions' device when the pattern is asked
    chosen = torch.tensor(list(indices), dtype=torch.long, device="cpu")

    def allowed(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        g = chosen.to(i.device)
        return torch.isin(i, g) | torch.isin(j, g)

    return allowed


def random_blocks(n: int, block_size: int, n_random: int, seed: int = 0) -> MaskFn:
    """BigBird's random attention: each query block sees ``n_random`` key blocks drawn at random.

    The draw is fixed by ``seed`` (a ``torch.Generator``; the global RNG is untouched).

    Example:
        >>> m = dense_mask(random_blocks(8, block_size=2, n_random=1, seed=0), 8)
        >>> m.view(4, 2, 4, 2).any(-1).any(1).sum(-1).tolist()  # one key block per query block
        [1, 1, 1, 1]
    """
    n_blocks = math.ceil(n / block_size)
    if not 0 <= n_random <= n_blocks:
        raise ValueError(f"n_random={n_random} must be between 0 and the {n_blocks} key blocks")
    g = torch.Generator().manual_seed(seed)
    layout = torch.zeros(n_blocks, n_blocks, dtype=torch.bool, device=g.device)
    for row in range(n_blocks):
        layout[row, torch.randperm(n_blocks, generator=g, device=g.device)[:n_random]] = True

    def allowed(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        table = layout.to(i.device)
        return table[(i // block_size).clamp(0, n_blocks - 1),
                     (j // block_size).clamp(0, n_blocks - 1)]

    return allowed


def union(*patterns: MaskFn) -> MaskFn:
    """A query may attend where any of ``patterns`` allows it (BigBird = window + global + random).

    Example:
        >>> dense_mask(union(sliding_window(0), global_tokens([2])), 3).int()
        tensor([[1, 0, 1],
                [0, 1, 1],
                [1, 1, 1]], dtype=torch.int32)
    """
    if not patterns:
        raise ValueError("union needs at least one pattern")

    def allowed(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        out = patterns[0](i, j)
        for p in patterns[1:]:
            out = out | p(i, j)
        return out

    return allowed


def dense_mask(pattern: MaskFn, n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The ``(n, n)`` boolean mask of a pattern, ``True`` = may attend."""
    pos = torch.arange(n, device=device)
    return pattern(pos[:, None], pos[None, :]).expand(n, n).clone()


def mask_to_edges(mask: torch.Tensor) -> torch.Tensor:
    """The attention graph as edges ``(2, E)``: row 0 the queries, row 1 the keys they may see.

    Example:
        >>> mask_to_edges(dense_mask(sliding_window(1, causal=True), 3)).tolist()
        [[0, 1, 1, 2, 2], [0, 0, 1, 1, 2]]
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a (queries, keys) boolean tensor, got {mask.dtype} of "
                         f"shape {tuple(mask.shape)}")
    return mask.nonzero().T


def edges_to_mask(edges: torch.Tensor, n_queries: int, n_keys: int) -> torch.Tensor:
    """The inverse of :func:`mask_to_edges`: an ``(n_queries, n_keys)`` boolean mask."""
    check_int_tensor("edges", edges, shape="(2, E)")
    if edges.dim() != 2 or edges.shape[0] != 2:
        raise ValueError(f"edges must be (2, E), got {tuple(edges.shape)}")
    check_ids("edges[0] (the queries)", edges[0], n_queries)
    check_ids("edges[1] (the keys)", edges[1], n_keys)
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool, device=edges.device)
    mask[edges[0], edges[1]] = True
    return mask


def receptive_field(mask: torch.Tensor, n_layers: int) -> torch.Tensor:
    r"""Which inputs can reach each output after ``n_layers`` layers with this mask.

    A layer mixes position ``i`` with its allowed keys and (residual connection) with itself:
    :math:`R_1 = M \lor I`, :math:`R_{l} = R_{l-1} \circ R_1` (boolean matrix product).

    Args:
        mask: ``(n, n)`` boolean, ``True`` = may attend.
        n_layers: ``L >= 1``.

    Returns:
        ``(n, n)`` boolean; its row sums are the receptive field sizes.

    Example:
        >>> receptive_field(dense_mask(sliding_window(1), 9), 3)[4].int().tolist()  # 2*3*1 + 1
        [0, 1, 1, 1, 1, 1, 1, 1, 0]
    """
    if mask.dim() != 2 or mask.shape[0] != mask.shape[1] or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a square boolean (n, n) tensor, got {mask.dtype} of shape "
                         f"{tuple(mask.shape)}")
    if n_layers < 1:
        raise ValueError(f"n_layers must be at least 1, got {n_layers}")
    step = (mask | torch.eye(mask.shape[0], dtype=torch.bool, device=mask.device)).float()
    reach = step
    for _ in range(n_layers - 1):
        reach = ((reach @ step) > 0).float()  # counts of paths, thresholded: boolean product
    return reach > 0


def layers_to_connect(mask: torch.Tensor, max_layers: int | None = None) -> int | None:
    """The fewest layers after which the last output depends on the first input and vice versa.

    Measured with :func:`receptive_field` (residual connections included), one layer at a time.
    A sliding window of ``w`` keys on each side moves information ``w`` positions per layer, so
    it needs ``ceil((n - 1) / w)`` layers; a global token, two.

    Args:
        mask: ``(n, n)`` boolean, ``True`` = may attend.
        max_layers: give up after this many layers (default ``n``: a pattern that has not
            connected the ends by then never will).

    Returns:
        The number of layers, or ``None`` when the ends are never connected.

    Example:
        >>> layers_to_connect(dense_mask(sliding_window(2), 33))  # ceil(32 / 2)
        16
        >>> layers_to_connect(dense_mask(dilated_window(1, 2), 6)) is None  # odd distance 5
        True
    """
    check_bool_tensor("mask", mask, ndim=2, shape="(n, n)")
    if mask.shape[0] != mask.shape[1]:
        raise ValueError(f"mask must be square (n, n), got shape {tuple(mask.shape)}")
    n = mask.shape[0]
    limit = n if max_layers is None else max_layers
    if n == 1:
        return 1
    step = (mask | torch.eye(n, dtype=torch.bool, device=mask.device)).float()
    reach = step
    for layers in range(1, limit + 1):
        if reach[-1, 0] > 0 and reach[0, -1] > 0:
            return layers
        reach = ((reach @ step) > 0).float()
    return None


def block_layout(pattern: MaskFn, n: int, block_size: int,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """``(n_blocks, n_blocks)`` boolean: which key blocks hold an allowed key for each query block.

    Built one query block at a time (``block_size x n`` booleans at once, never ``n x n``).

    Example:
        >>> block_layout(sliding_window(1), 8, block_size=2).int()
        tensor([[1, 1, 0, 0],
                [1, 1, 1, 0],
                [0, 1, 1, 1],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    if block_size <= 0 or n <= 0:
        raise ValueError(f"need n > 0 and block_size > 0, got n={n}, block_size={block_size}")
    n_blocks = math.ceil(n / block_size)
    keys = torch.arange(n_blocks * block_size, device=device)
    rows = []
    for b in range(n_blocks):
        queries = torch.arange(b * block_size, (b + 1) * block_size, device=device)[:, None]
        ok = pattern(queries, keys[None, :]) & (keys[None, :] < n) & (queries < n)
        rows.append(ok.view(block_size, n_blocks, block_size).any(dim=2).any(dim=0))
    return torch.stack(rows)


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: MaskFn,
                           block_size: int, layout: torch.Tensor | None = None,
                           scale: float | None = None) -> torch.Tensor:
    r"""Softmax attention restricted to ``pattern``, computed only on the blocks it touches.

    For each query block, gather the ``m`` key blocks its layout row allows (rows with fewer are
    padded with masked blocks), score against those ``m * block_size`` keys only, mask inside
    the blocks with ``pattern``, and normalise. Scores cost ``T m b`` numbers instead of
    :math:`T^2`: for a fixed window, time and memory grow linearly with ``T``.

    Args:
        q, k: ``(..., T, d)``; v: ``(..., T, d_v)`` (self-attention: one length ``T``).
        pattern: a mask function (:func:`sliding_window`, :func:`union`, ...).
        block_size: ``b``; ``T`` need not be a multiple (the last block is padded).
        layout: the precomputed :func:`block_layout` (computed here when omitted).
        scale: multiplies the scores (default ``1 / sqrt(d)``).

    Returns:
        ``(..., T, d_v)``, equal to dense attention under ``dense_mask(pattern, T)``; queries with
        no allowed key get zeros.

    Example:
        >>> from course_lib.attention import scaled_dot_product_attention
        >>> q, k, v = torch.randn(3, 2, 10, 4, dtype=torch.float64).unbind(0)
        >>> pat = sliding_window(2, causal=True)
        >>> out = block_sparse_attention(q, k, v, pat, block_size=4)
        >>> torch.allclose(out, scaled_dot_product_attention(q, k, v, dense_mask(pat, 10)))
        True
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t)
    check_same_dtype(q=q, k=k, v=v)
    if q.dim() < 2 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"block_sparse_attention is self-attention: q and k must have the same "
                         f"shape (..., T, d) and v (..., T, d_v); got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    *batch, T, d = q.shape
    n_blocks = math.ceil(T / block_size)
    if layout is None:
        layout = block_layout(pattern, T, block_size, q.device)
    if layout.shape != (n_blocks, n_blocks) or layout.dtype != torch.bool:
        raise ValueError(f"layout must be boolean ({n_blocks}, {n_blocks}) for T={T} and "
                         f"block_size={block_size}, got {layout.dtype} {tuple(layout.shape)}")
    layout = layout.to(q.device)
    width = max(int(layout.sum(dim=1).max()), 1)                     # key blocks per query block
    # Allowed key blocks first (stable sort keeps them in order), then padding blocks.
    idx = torch.sort((~layout).to(torch.uint8), dim=1, stable=True).indices[:, :width]
    used = torch.gather(layout, 1, idx)                              # (n_blocks, width)
    pad = n_blocks * block_size - T
    if pad:
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    qb = q.reshape(*batch, n_blocks, block_size, d)                  # (..., nb, b, d)
    kb = k.reshape(*batch, n_blocks, block_size, d)[..., idx, :, :]  # (..., nb, m, b, d)
    vb = v.reshape(*batch, n_blocks, block_size, v.shape[-1])[..., idx, :, :]
    kb = kb.flatten(-3, -2)                                          # (..., nb, m b, d)
    vb = vb.flatten(-3, -2)                                          # (..., nb, m b, d_v)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = (qb @ kb.transpose(-2, -1)) * scale                          # (..., nb, b, m b)
    offsets = torch.arange(block_size, device=q.device)
    q_pos = (torch.arange(n_blocks, device=q.device)[:, None] * block_size + offsets)[:, :, None]
    k_pos = (idx[:, :, None] * block_size + offsets).flatten(1)[:, None, :]   # (nb, 1, m b)
    k_used = used[:, :, None].expand(n_blocks, width, block_size).flatten(1)[:, None, :]
    allowed = pattern(q_pos, k_pos) & k_used & (k_pos < T)           # (nb, b, m b)
    w = masked_softmax(s, allowed.expand(s.shape[-3:]))
    out = w @ vb                                                     # (..., nb, b, d_v)
    return out.reshape(*batch, n_blocks * block_size, v.shape[-1])[..., :T, :]
