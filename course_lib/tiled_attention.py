r"""Exact attention in O(n) memory: the online softmax and attention tiled over queries and keys.

Taught in chapter 6, section 5. Milakov and Gimelshein (2018), "Online normalizer calculation
for softmax", compute a softmax in one pass with a running maximum :math:`m` and a running sum
:math:`\ell` rescaled whenever the maximum grows. Rabe and Staats (2021), "Self-attention does
not need O(n^2) memory", and Dao et al. (2022), "FlashAttention", apply it to attention: walk
over blocks of keys for each block of queries, keep only an output accumulator, :math:`m` and
:math:`\ell` per query row, and never hold the :math:`T_q \times T_k` score matrix.

For backward, :class:`TiledAttentionFunction` saves the inputs, the output ``O`` and the
log-sum-exp ``L = m + log(l)`` of each row (``O(n d)`` numbers) and recomputes each tile's
weights :math:`P = \exp(S - L)` from ``q`` and ``k``:

.. math:: dV = P^\top dO, \quad dP = dO\, V^\top, \quad
          dS = P \odot (dP - D), \; D_i = \textstyle\sum_c dO_{ic} O_{ic}, \quad
          dQ = s\, dS\, K, \quad dK = s\, dS^\top Q

(:math:`s` the scale). Peer: ``torch.nn.functional.scaled_dot_product_attention``, in values and
gradients. Masks follow course_lib's convention (``True`` = may attend); a query row with no
allowed key returns zeros and gets zero gradients.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from course_lib.checks import check_float_tensor, check_int, check_same_dtype, check_tensor


def online_softmax_update(m: torch.Tensor, l: torch.Tensor, scores: torch.Tensor,
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Fold one block of scores into the running maximum and sum of an online softmax.

    .. math:: m' = \max(m, \max_j s_j), \qquad
              \ell' = \ell\, e^{m - m'} + \textstyle\sum_j e^{s_j - m'}

    Start from :math:`m = -\infty`, :math:`\ell = 0`. Scores of ``-inf`` (masked) add nothing; a
    row that has seen only ``-inf`` keeps :math:`m = -\infty`, :math:`\ell = 0`.

    Args:
        m: running maximum ``(...)``.
        l: running sum ``(...)``, relative to ``exp(m)``.
        scores: the new block ``(..., b)``.

    Returns:
        ``(m', l')``, both ``(...)``.

    Example:
        >>> s = torch.tensor([1.0, 3.0, 2.0, 0.5])
        >>> m, l = torch.tensor(float("-inf")), torch.tensor(0.0)
        >>> for block in s.split(2):
        ...     m, l = online_softmax_update(m, l, block)
        >>> torch.allclose(torch.exp(s - m) / l, torch.softmax(s, 0))
        True
    """
    for name, t in (("m", m), ("l", l), ("scores", scores)):
        check_float_tensor(name, t)
    check_same_dtype(m=m, l=l, scores=scores)
    if m.shape != l.shape or scores.shape[:-1] != m.shape:
        raise ValueError(f"m {tuple(m.shape)} and l {tuple(l.shape)} must be the shape of scores "
                         f"{tuple(scores.shape)} without its last dimension")
    m_new = torch.maximum(m, scores.amax(dim=-1))
    safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))  # -inf rows: 0
    l_new = l * torch.exp(m - safe) + torch.exp(scores - safe[..., None]).sum(dim=-1)
    return m_new, l_new


def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dimension computed block by block with :func:`online_softmax_update`.

    One pass reads the scores to find ``m`` and ``l``; the weights are ``exp(s - m) / l``.
    Rows that are all ``-inf`` give zeros.

    Example:
        >>> s = torch.randn(3, 10)
        >>> torch.allclose(online_softmax(s, block_size=4), torch.softmax(s, -1))
        True
    """
    check_float_tensor("scores", scores, min_ndim=1, shape="(..., n)")
    if scores.shape[-1] == 0:
        raise ValueError(f"scores has an empty last dimension: shape {tuple(scores.shape)}")
    if check_int("block_size", block_size) <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    l = torch.zeros_like(m)
    for block in scores.split(block_size, dim=-1):
        m, l = online_softmax_update(m, l, block)
    safe_m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    safe_l = torch.where(l > 0, l, torch.ones_like(l))
    return torch.exp(scores - safe_m[..., None]) / safe_l[..., None]


def _tile_mask(causal: bool, mask: torch.Tensor | None, q0: int, q1: int, k0: int, k1: int,
               offset: int, device: torch.device) -> torch.Tensor | None:
    """The ``(..., q1-q0, k1-k0)`` may-attend mask of one tile, or None when all is allowed."""
    tile = None
    if causal:  # query i (at position i + offset) sees keys j <= i + offset
        rows = torch.arange(q0, q1, device=device)[:, None] + offset
        tile = torch.arange(k0, k1, device=device)[None, :] <= rows
    if mask is not None:
        part = mask[..., q0:q1, k0:k1]
        tile = part if tile is None else tile & part
    return tile


def _skip(causal: bool, q1: int, k0: int, offset: int) -> bool:
    """True when the whole tile lies above the causal diagonal (no query sees any of its keys)."""
    return causal and k0 > q1 - 1 + offset


def tiled_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                            causal: bool = False, mask: torch.Tensor | None = None,
                            block_q: int = 128, block_k: int = 128,
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass tile by tile: the output ``(..., T_q, d_v)`` and log-sum-exp ``(..., T_q)``.

    Rows with no allowed key get output 0 and log-sum-exp ``-inf``. No gradient bookkeeping: use
    :func:`tiled_attention` for a differentiable call.
    """
    _check_inputs(q, k, v, causal, mask, block_q, block_k)
    T_q, T_k = q.shape[-2], k.shape[-2]
    offset = T_k - T_q  # causal queries are the last T_q positions (course_lib.causal_mask)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    out = q.new_zeros(*batch, T_q, v.shape[-1])
    lse = q.new_full((*batch, T_q), float("-inf"))
    for q0 in range(0, T_q, block_q):
        q1 = min(q0 + block_q, T_q)
        qi = q[..., q0:q1, :]                                        # (..., bq, d)
        m = q.new_full((*batch, q1 - q0), float("-inf"))             # running max
        l = q.new_zeros(*batch, q1 - q0)                             # running sum
        acc = q.new_zeros(*batch, q1 - q0, v.shape[-1])              # unnormalised output
        for k0 in range(0, T_k, block_k):
            k1 = min(k0 + block_k, T_k)
            if _skip(causal, q1, k0, offset):
                break
            s = (qi @ k[..., k0:k1, :].transpose(-2, -1)) * scale    # (..., bq, bk)
            tile = _tile_mask(causal, mask, q0, q1, k0, k1, offset, q.device)
            if tile is not None:
                s = s.masked_fill(~tile, float("-inf"))
            m_new, l = online_softmax_update(m, l, s)
            safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            p = torch.exp(s - safe[..., None])                       # (..., bq, bk)
            acc = acc * torch.exp(m - safe)[..., None] + p @ v[..., k0:k1, :]
            m = m_new
        seen = l > 0
        out[..., q0:q1, :] = acc / torch.where(seen, l, torch.ones_like(l))[..., None]
        lse[..., q0:q1] = torch.where(seen, m + torch.log(torch.where(seen, l, torch.ones_like(l))),
                                      torch.full_like(l, float("-inf")))
    return out, lse


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes each tile from ``q``, ``k`` and the log-sum-exp.

    Saved for backward: ``q, k, v`` (the inputs), the output and the ``(..., T_q)`` log-sum-exp;
    never a ``T_q x T_k`` tensor. Call it through :func:`tiled_attention`.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scale: float, causal: bool, mask: torch.Tensor | None, block_q: int,
                block_k: int) -> torch.Tensor:
        out, lse = tiled_attention_forward(q, k, v, scale, causal, mask, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        # ctx is Any: FunctionCtx declares no attributes for what forward keeps for backward.
        ctx.mask = mask  # boolean, the caller's (None for causal or unmasked attention)
        ctx.config = (scale, causal, block_q, block_k)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        scale, causal, block_q, block_k = ctx.config
        mask = ctx.mask
        T_q, T_k = q.shape[-2], k.shape[-2]
        offset = T_k - T_q
        batch = d_out.shape[:-2]
        D = (d_out * out).sum(dim=-1)                                # (..., T_q)
        safe_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        dq = torch.zeros(*batch, T_q, q.shape[-1], dtype=q.dtype, device=q.device)
        dk = torch.zeros(*batch, T_k, k.shape[-1], dtype=k.dtype, device=k.device)
        dv = torch.zeros(*batch, T_k, v.shape[-1], dtype=v.dtype, device=v.device)
        for k0 in range(0, T_k, block_k):
            k1 = min(k0 + block_k, T_k)
            kj, vj = k[..., k0:k1, :], v[..., k0:k1, :]              # (..., bk, d)
            for q0 in range(0, T_q, block_q):
                q1 = min(q0 + block_q, T_q)
                if _skip(causal, q1, k0, offset):
                    continue
                qi, doi = q[..., q0:q1, :], d_out[..., q0:q1, :]
                s = (qi @ kj.transpose(-2, -1)) * scale               # (..., bq, bk)
                tile = _tile_mask(causal, mask, q0, q1, k0, k1, offset, q.device)
                if tile is not None:
                    s = s.masked_fill(~tile, float("-inf"))
                p = torch.exp(s - safe_lse[..., q0:q1, None])         # recomputed weights
                p = torch.where(torch.isfinite(lse[..., q0:q1, None]), p, torch.zeros_like(p))
                dv[..., k0:k1, :] += p.transpose(-2, -1) @ doi
                dp = doi @ vj.transpose(-2, -1)                       # (..., bq, bk)
                ds = p * (dp - D[..., q0:q1, None])
                dq[..., q0:q1, :] += (ds @ kj) * scale
                dk[..., k0:k1, :] += (ds.transpose(-2, -1) @ qi) * scale
        return (_unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape),
                None, None, None, None, None)


def _unbroadcast(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum ``grad`` over the batch dimensions that were broadcast from ``shape``."""
    while grad.dim() > len(shape):
        grad = grad.sum(dim=0)
    for i, n in enumerate(shape):
        if n == 1 and grad.shape[i] != 1:
            grad = grad.sum(dim=i, keepdim=True)
    return grad


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  mask: torch.Tensor | None, block_q: int, block_k: int) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k, v need (..., length, features); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same feature size d; got q {tuple(q.shape)} "
                         f"and k {tuple(k.shape)}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k and v must have the same batch dimensions and length; got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dimensions of q {tuple(q.shape)} and k {tuple(k.shape)} do "
                         "not broadcast") from None
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise TypeError(f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(f"causal attention needs T_q <= T_k; got T_q={q.shape[-2]}, "
                         f"T_k={k.shape[-2]}")
    if block_q <= 0 or block_k <= 0:
        raise ValueError(f"block sizes must be positive, got block_q={block_q}, block_k={block_k}")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = may attend), got {mask.dtype}")
        scores = torch.Size((*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2],
                             k.shape[-2]))
        try:
            fits = torch.broadcast_shapes(mask.shape, scores) == scores
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                             f"{tuple(scores)} (..., T_q, T_k)")


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    mask: torch.Tensor | None = None, scale: float | None = None,
                    block_q: int = 128, block_k: int = 128) -> torch.Tensor:
    r"""Exact softmax attention computed tile by tile, in ``O(T (d + d_v))`` extra memory.

    .. math:: O = \mathrm{softmax}\!\left(s\, Q K^\top\right) V, \qquad
              s = 1/\sqrt{d} \text{ by default}

    Equal to ``torch.nn.functional.scaled_dot_product_attention`` in values and gradients.
    With ``causal``, the queries are the last ``T_q`` positions of the ``T_k`` keys (query ``i``
    sees keys ``j <= i + T_k - T_q``, as :func:`course_lib.attention.causal_mask`); tiles
    entirely above the diagonal are skipped.

    Args:
        q: ``(..., T_q, d)``, e.g. ``(B, H, T, d)``.
        k: ``(..., T_k, d)``.
        v: ``(..., T_k, d_v)``.
        causal: apply the causal mask (needs ``T_q <= T_k``).
        mask: boolean, broadcastable to ``(..., T_q, T_k)``, ``True`` = may attend.
        scale: multiplies the scores (default ``1 / sqrt(d)``).
        block_q, block_k: tile sizes.

    Returns:
        ``(..., T_q, d_v)``; rows with no allowed key are zero.

    Example:
        >>> q, k, v = torch.randn(3, 1, 2, 50, 8, dtype=torch.float64).unbind(0)
        >>> out = tiled_attention(q, k, v, causal=True, block_q=16, block_k=16)
        >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, ref, atol=1e-12)
        True
    """
    _check_inputs(q, k, v, causal, mask, block_q, block_k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # torch leaves autograd.Function.apply unannotated; it returns forward's tensor.
    out: torch.Tensor = TiledAttentionFunction.apply(  # type: ignore[no-untyped-call]
        q, k, v, scale, causal, mask, block_q, block_k)
    return out


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """The textbook path that materialises the ``(..., T_q, T_k)`` scores and weights.

    What :func:`tiled_attention` avoids; used as the memory baseline.

    Example:
        >>> q = k = v = torch.randn(1, 6, 4, dtype=torch.float64)
        >>> torch.allclose(naive_attention(q, k, v, causal=True),
        ...                tiled_attention(q, k, v, causal=True))
        True
    """
    _check_inputs(q, k, v, causal, None, 1, 1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale                            # (..., T_q, T_k)
    if causal:
        T_q, T_k = q.shape[-2], k.shape[-2]
        allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril(T_k - T_q)
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, dim=-1) @ v                              # (..., T_q, d_v)
