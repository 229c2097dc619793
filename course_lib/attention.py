"""Attention as the course teaches it: masked softmax and scaled dot-product attention.

Taught in chapter 1 (masked softmax over padded positions) and chapter 2, sections 1 and 2
(scaled dot-product attention, why the scores are divided by sqrt(d_k), masks, and decoding one
token at a time with a key-value cache: :func:`cached_attention_step`).

Weights follow ``nn.Linear``'s convention everywhere in the course: ``y = x W^T``, ``W`` shaped
``(out, in)``.

One mask convention everywhere in course_lib: a boolean tensor in which ``True`` means "may
attend" (the convention of ``torch.nn.functional.scaled_dot_product_attention``). A boolean mask
is the same thing as an additive bias of ``0`` (allowed) and ``-inf`` (masked) on the scores
(:func:`additive_mask`). Masked scores are filled with ``-inf``; a row whose every position is
masked returns zeros, never NaN, on every path and in the backward pass too.

Two paths behind one API, chosen by ``impl``:

* ``"reference"``: the math step by step (scores, masked softmax, weighted sum of values); it can
  return the attention weights.
* ``"fast"``: ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels); no weights.
"""

from __future__ import annotations

import math
from typing import Literal, overload

import torch
import torch.nn.functional as F

from course_lib.checks import (
    check_bool_tensor,
    check_float_tensor,
    check_int_tensor,
    check_same_dtype,
    check_tensor,
)

Impl = Literal["reference", "fast"]
IMPLS: tuple[str, ...] = ("reference", "fast")


def _check_mask(mask: torch.Tensor, scores_shape: torch.Size, name: str = "mask") -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor (True = may attend), "
                        f"got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got {mask.dtype}")
    try:
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:  # the mask must broadcast *to* the scores, not enlarge them
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (..., queries, keys)"
        )


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""The additive form of a boolean mask: ``0`` where attending is allowed, ``-inf`` elsewhere.

    .. math:: \mathrm{softmax}(s + b)_j \propto m_j e^{s_j}, \qquad
              b_j = \begin{cases} 0 & m_j = 1 \\ -\infty & m_j = 0 \end{cases}

    Adding ``b`` to the scores before the softmax is what "masking" means; a row that is ``-inf``
    everywhere makes the plain softmax return NaN (0/0), which :func:`masked_softmax` avoids.

    Args:
        mask: boolean, any shape; ``True`` means "may attend".
        dtype: floating dtype of the result.

    Returns:
        A tensor of ``mask``'s shape and device.

    Example:
        >>> additive_mask(torch.tensor([True, False]))
        tensor([0., -inf])
    """
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got {mask.dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, float("-inf"))


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None,
                   dim: int = -1) -> torch.Tensor:
    r"""Softmax over ``dim`` that gives masked positions exactly zero weight.

    .. math:: \alpha_i = \frac{m_i\, e^{s_i}}{\sum_j m_j\, e^{s_j}}, \qquad m_i \in \{0, 1\}

    A row whose every position is masked has no distribution to return; it gets all zeros
    (not the NaN that ``softmax`` of a row of ``-inf`` gives), so padded queries stay harmless.
    Its gradient is zero, not NaN.

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
    check_float_tensor("scores", scores)
    if mask is None:
        return torch.softmax(scores, dim=dim)
    _check_mask(mask, scores.shape)
    scores = scores.masked_fill(~mask, float("-inf"))
    # Subtract the row max for stability; a fully masked row has max -inf, replaced by 0.
    row_max = scores.amax(dim=dim, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=dim, keepdim=True)
    return weights / torch.where(total > 0, total, torch.ones_like(total))


def _check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_float_tensor(name, t)
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
    if key.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            f"key and value must have the same batch dimensions; got key {tuple(key.shape)} "
            f"and value {tuple(value.shape)}"
        )
    try:
        if query.shape[:-2] != key.shape[:-2]:
            torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query {tuple(query.shape)} and key {tuple(key.shape)} do "
            "not broadcast"
        ) from None
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value dtypes differ: {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")


# The return type follows return_weights: the output alone, or the output and the weights.
@overload
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
    *, impl: Impl = "reference", scale: float | None = None, dropout_p: float = 0.0,
    return_weights: Literal[False] = False,
) -> torch.Tensor: ...
@overload
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
    *, impl: Impl = "reference", scale: float | None = None, dropout_p: float = 0.0,
    return_weights: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
    *, impl: Impl = "reference", scale: float | None = None, dropout_p: float = 0.0,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...
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

    Dividing by :math:`\sqrt{d_k}` keeps the scores at unit variance when the entries of ``q`` and
    ``k`` are independent with unit variance (:math:`\mathrm{Var}(q \cdot k) = d_k`), so the
    softmax does not saturate and its Jacobian :math:`\mathrm{diag}(s) - s s^\top` does not vanish.

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
        masked get zeros on both paths (and zero gradients, never NaN).

    Raises:
        ValueError: shapes that do not fit (d_k of query and key, lengths of key and value, a
            mask that does not broadcast), an unknown ``impl``, weights asked of the fast path.
        TypeError: a mask that is not boolean, inputs of different dtypes.

    Example:
        >>> q = k = torch.eye(2)[None]  # two orthogonal keys
        >>> v = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
        >>> out = scaled_dot_product_attention(q, k, v, scale=100.0)
        >>> torch.allclose(out, v, atol=1e-6)
        True
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be 'reference' or 'fast', got {impl!r}")
    _check_qkv(query, key, value)
    if mask is not None:
        batch = (query.shape[:-2] if query.shape[:-2] == key.shape[:-2]
                 else torch.broadcast_shapes(query.shape[:-2], key.shape[:-2]))
        _check_mask(mask, torch.Size((*batch, query.shape[-2], key.shape[-2])))
    if impl == "fast":
        if return_weights:
            raise ValueError("impl='fast' does not return weights; use impl='reference'")
        has_key = None
        if mask is not None:
            has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
            if mask.device.type == "meta" or bool(has_key.all()):  # meta: no values to read
                has_key = None
            else:
                # Some backends give NaN (and NaN gradients) for a query with no allowed key. Let
                # such queries attend everywhere, then zero their output: finite both ways.
                mask = mask | ~has_key
        # scale=None lets torch apply its own default, 1/sqrt(d_k).
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                             dropout_p=dropout_p, scale=scale)
        if has_key is not None:
            out = out.masked_fill(~has_key, 0.0)
        return out
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    weights = masked_softmax(scores, mask)            # (..., T_q, T_k), rows sum to 1 (or 0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ value                             # (..., T_q, d_v)
    return (out, weights) if return_weights else out


def _check_step(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                cache_k: torch.Tensor, cache_v: torch.Tensor) -> None:
    tensors = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "cache_k": cache_k,
               "cache_v": cache_v}
    for name, t in tensors.items():
        check_float_tensor(name, t)
    check_same_dtype(**tensors)
    if x.dim() != 2:
        raise ValueError(f"x must be (batch, d_model), one new token per sequence; got "
                         f"{tuple(x.shape)}")
    d_model = x.shape[-1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w.dim() != 2 or w.shape[1] != d_model:
            raise ValueError(f"{name} must be (out, d_model={d_model}) and is applied as "
                             f"x @ {name}.T; got {tuple(w.shape)}")
    if w_q.shape[0] != w_k.shape[0]:
        raise ValueError(f"w_q and w_k must project to the same key size d_k; got "
                         f"{tuple(w_q.shape)} and {tuple(w_k.shape)}")
    expected = {"cache_k": w_k.shape[0], "cache_v": w_v.shape[0]}
    for name, cache in (("cache_k", cache_k), ("cache_v", cache_v)):
        if cache.dim() != 3 or cache.shape[0] != x.shape[0] or cache.shape[2] != expected[name]:
            raise ValueError(f"{name} must be (batch={x.shape[0]}, t, {expected[name]}); got "
                             f"{tuple(cache.shape)}")
    if cache_k.shape[1] != cache_v.shape[1]:
        raise ValueError(f"cache_k and cache_v must hold the same number of tokens; got "
                         f"{cache_k.shape[1]} and {cache_v.shape[1]}")


def cached_attention_step(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
    cache_k: torch.Tensor, cache_v: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""One decoding step of causal self-attention with a key-value cache (single head).

    Under a causal mask the output at position ``t`` reads only the keys and values of positions
    ``<= t``, and those never change when later tokens arrive. A decoder therefore keeps them (the
    *cache*) and, for each new token, computes one query, one key and one value:

    .. math:: q_t = W^Q x_t,\; k_t = W^K x_t,\; v_t = W^V x_t, \qquad
              y_t = \sum_{j \le t} \mathrm{softmax}_j\!\left(\frac{q_t \cdot k_j}{\sqrt{d_k}}
              \right) v_j

    Stepping through a sequence from an empty cache gives exactly the outputs of causal
    self-attention over the whole sequence, at the cost of ``t`` scores at step ``t`` instead of
    recomputing all ``t^2`` of them.

    Args:
        x: ``(B, d_model)``, the new token of each sequence.
        w_q, w_k: ``(d_k, d_model)``; w_v: ``(d_v, d_model)``. Applied as ``x @ w.T``
            (``nn.Linear``'s convention).
        cache_k: ``(B, t, d_k)`` and cache_v: ``(B, t, d_v)``, the keys and values of the ``t``
            earlier tokens (``t`` may be 0).

    Returns:
        ``(y, cache_k, cache_v)``: the output ``(B, d_v)`` and the caches with the new key and
        value appended, ``(B, t + 1, d_k)`` and ``(B, t + 1, d_v)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> xs = torch.randn(2, 5, 6, generator=g)
        >>> w_q, w_k, w_v = (torch.randn(n, 6, generator=g) for n in (4, 4, 3))
        >>> k, v = torch.zeros(2, 0, 4), torch.zeros(2, 0, 3)
        >>> steps = []
        >>> for t in range(5):
        ...     y, k, v = cached_attention_step(xs[:, t], w_q, w_k, w_v, k, v)
        ...     steps.append(y)
        >>> full = scaled_dot_product_attention(xs @ w_q.T, xs @ w_k.T, xs @ w_v.T, causal_mask(5))
        >>> torch.allclose(torch.stack(steps, 1), full, atol=1e-6), tuple(k.shape)
        (True, (2, 5, 4))
    """
    _check_step(x, w_q, w_k, w_v, cache_k, cache_v)
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T                # (B, d_k), (B, d_k), (B, d_v)
    cache_k = torch.cat([cache_k, k[:, None]], dim=1)        # (B, t + 1, d_k)
    cache_v = torch.cat([cache_v, v[:, None]], dim=1)        # (B, t + 1, d_v)
    y = scaled_dot_product_attention(q[:, None], cache_k, cache_v)  # (B, 1, d_v): no mask needed
    return y[:, 0], cache_k, cache_v


def causal_mask(length: int, device: torch.device | str | None = None, *,
                n_keys: int | None = None) -> torch.Tensor:
    """Boolean causal mask: a query may attend to its own position and the ones before it.

    With ``n_keys`` larger than ``length`` the queries are the *last* ``length`` positions of a
    sequence of ``n_keys`` (decoding with cached keys): query ``i`` sits at position
    ``i + n_keys - length`` and may attend to keys ``j <= i + n_keys - length``.

    Args:
        length: number of queries ``T_q``.
        device: where to build the mask.
        n_keys: number of keys ``T_k`` (default ``length``); must be ``>= length``.

    Returns:
        ``(T_q, T_k)`` boolean, ``True`` = may attend.

    Example:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, n_keys=4).int()
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    n_keys = length if n_keys is None else n_keys
    if length < 0 or n_keys < length:
        raise ValueError(f"causal_mask needs 0 <= length <= n_keys; got length={length}, "
                         f"n_keys={n_keys}")
    return torch.ones(length, n_keys, dtype=torch.bool, device=device).tril(n_keys - length)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """``(B, max_len)`` boolean mask, ``True`` at the first ``lengths[b]`` positions of row b.

    Example:
        >>> padding_mask(torch.tensor([1, 3])).int()
        tensor([[1, 0, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    check_int_tensor("lengths", lengths, shape="(batch,)")
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {int(lengths.min())}")
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def attention_mask(key_padding: torch.Tensor | None = None,
                   attn: torch.Tensor | None = None) -> torch.Tensor | None:
    """Combine a key padding mask and a per-query mask into one mask for multi-head attention.

    Args:
        key_padding: ``(B, T_k)`` boolean, ``True`` at real (non-padding) keys.
        attn: ``(T_q, T_k)`` or ``(B, T_q, T_k)`` boolean, e.g. :func:`causal_mask`.

    Returns:
        A boolean mask broadcastable to ``(B, h, T_q, T_k)`` (``True`` = may attend), or ``None``
        when both are ``None``.

    Example:
        >>> attention_mask(padding_mask(torch.tensor([2]), max_len=3), causal_mask(3)).shape
        torch.Size([1, 1, 3, 3])
    """
    mask = None
    if key_padding is not None:
        check_bool_tensor("key_padding", key_padding, shape="(batch, keys)")
        if key_padding.dim() != 2:
            raise ValueError(f"key_padding must be (batch, keys), got {tuple(key_padding.shape)}")
        mask = key_padding[:, None, None, :]  # (B, 1, 1, T_k)
    if attn is not None:
        check_bool_tensor("attn", attn, shape="(queries, keys)")
        if attn.dim() not in (2, 3):
            raise ValueError(f"attn must be (queries, keys) or (batch, queries, keys), got "
                             f"{tuple(attn.shape)}")
        if key_padding is not None and attn.shape[-1] != key_padding.shape[-1]:
            raise ValueError(f"key_padding has {key_padding.shape[-1]} keys but attn has "
                             f"{attn.shape[-1]} (shapes {tuple(key_padding.shape)} and "
                             f"{tuple(attn.shape)})")
        attn = attn if attn.dim() == 2 else attn[:, None]  # (T_q, T_k) or (B, 1, T_q, T_k)
        mask = attn if mask is None else mask & attn
    return mask
