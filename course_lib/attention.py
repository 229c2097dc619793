"""Attention as the course teaches it: masked softmax and scaled dot-product attention.

Taught in chapter 1 (masked softmax over padded positions) and chapter 2, section 1 (scaled
dot-product attention, masks).

One mask convention everywhere in course_lib: a boolean tensor in which ``True`` means "may
attend" (the convention of ``torch.nn.functional.scaled_dot_product_attention``). Masked scores are
filled with ``-inf``; a row whose every position is masked returns zeros, never NaN.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

Impl = Literal["reference", "fast"]


def _check_mask(mask: torch.Tensor, scores_shape: torch.Size, name: str = "mask") -> None:
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got {mask.dtype}")
    try:
        torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (..., queries, keys)"
        ) from None


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None,
                   dim: int = -1) -> torch.Tensor:
    r"""Softmax over ``dim`` that gives masked positions exactly zero weight.

    .. math:: \alpha_i = \frac{m_i\, e^{s_i}}{\sum_j m_j\, e^{s_j}}, \qquad m_i \in \{0, 1\}

    A row whose every position is masked has no distribution to return; it gets all zeros
    (not the NaN that ``softmax`` of a row of ``-inf`` gives), so padded queries stay harmless.

    Args:
        scores: attention scores, any shape ``(..., n)``.
        mask: boolean, broadcastable to ``scores``; ``True`` means "may attend".
        dim: the dimension to normalise.

    Returns:
        Weights of the shape of ``scores``: non-negative, zero where masked, each row summing to
        one (or to zero when fully masked).

    Example:
        >>> masked_softmax(torch.tensor([[0.0, 0.0, 5.0]]), torch.tensor([[True, True, False]]))
        tensor([[0.5000, 0.5000, 0.0000]])
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    _check_mask(mask, scores.shape)
    scores = scores.masked_fill(~mask, float("-inf"))
    # Subtract the row max for stability; a fully masked row has max -inf, replaced by 0.
    row_max = scores.amax(dim=dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=dim, keepdim=True)
    return weights / torch.where(total > 0, total, torch.ones_like(total))


def _check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(
            "query, key and value need at least 2 dimensions (..., length, features); got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same feature size d_k; got {query.shape[-1]} "
            f"(query {tuple(query.shape)}) and {key.shape[-1]} (key {tuple(key.shape)})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length; got {key.shape[-2]} (key "
            f"{tuple(key.shape)}) and {value.shape[-2]} (value {tuple(value.shape)})"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value dtypes differ: {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    impl: Impl = "reference",
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Scaled dot-product attention (Vaswani et al., 2017, eq. 1).

    .. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}
              \right) V

    Args:
        query: ``(..., T_q, d_k)``.
        key: ``(..., T_k, d_k)``.
        value: ``(..., T_k, d_v)``.
        mask: boolean, broadcastable to ``(..., T_q, T_k)``; ``True`` means "may attend".
        impl: ``"reference"``, the math step by step (readable, returns weights); ``"fast"``,
            ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels, no weights).
        scale: multiplies the scores; default ``1 / sqrt(d_k)``.
        dropout_p: dropout on the attention weights (use 0 outside training).
        return_weights: also return the ``(..., T_q, T_k)`` weights (reference path only).

    Returns:
        ``(..., T_q, d_v)``, and the weights when ``return_weights``. Queries whose every key is
        masked get zeros on both paths.

    Example:
        >>> q = k = torch.eye(2)[None]  # two orthogonal keys
        >>> v = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
        >>> out = scaled_dot_product_attention(q, k, v, scale=100.0)
        >>> torch.allclose(out, v, atol=1e-6)
        True
    """
    _check_qkv(query, key, value)
    scores_shape = torch.Size((*torch.broadcast_shapes(query.shape[:-2], key.shape[:-2]),
                               query.shape[-2], key.shape[-2]))
    if mask is not None:
        _check_mask(mask, scores_shape)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if impl == "fast":
        if return_weights:
            raise ValueError("impl='fast' does not return weights; use impl='reference'")
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                             dropout_p=dropout_p, scale=scale)
        if mask is not None:
            # SDPA gives NaN for queries with no allowed key; the course convention is zeros.
            has_key = mask.any(dim=-1, keepdim=True)
            if not bool(has_key.all()):
                out = out.masked_fill(~has_key, 0.0)
        return out
    if impl != "reference":
        raise ValueError(f"impl must be 'reference' or 'fast', got {impl!r}")
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    weights = masked_softmax(scores, mask)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ value  # (..., T_q, d_v)
    return (out, weights) if return_weights else out


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """``(length, length)`` boolean mask: position ``t`` may attend to positions ``<= t``.

    Example:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """``(B, max_len)`` boolean mask, ``True`` at the first ``lengths[b]`` positions of row b.

    Example:
        >>> padding_mask(torch.tensor([1, 3])).int()
        tensor([[1, 0, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]
