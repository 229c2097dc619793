"""Multi-head attention (Vaswani et al., 2017, section 3.2.2).

Taught in chapter 2, section 3. Weights are ``nn.Linear``'s: shaped ``(out, in)``, applied as
``x @ w.T``. The projection of head ``i`` is rows ``i*d_head:(i+1)*d_head`` of one ``d x d``
weight; :func:`split_heads` cuts the projected features into heads, :func:`merge_heads`
concatenates them back. Tested against
``torch.nn.MultiheadAttention`` with copied weights.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import Impl, scaled_dot_product_attention
from course_lib.checks import check_float_tensor, check_tensor


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    r"""Cut the features of ``x`` into ``n_heads`` heads of ``d / n_heads`` features each.

    Head ``i`` gets features ``i*d_head : (i+1)*d_head``, so projecting with one ``(d, d)``
    weight stacking the heads' weights row-wise (``x @ W.T``) and splitting equals projecting
    with each head's ``(d_head, d)`` block of rows.

    Args:
        x: ``(B, T, d)``.
        n_heads: ``h``; must divide ``d``.

    Returns:
        ``(B, h, T, d / h)``.

    Example:
        >>> split_heads(torch.arange(4.0).view(1, 1, 4), 2)
        tensor([[[[0., 1.]],
        <BLANKLINE>
                 [[2., 3.]]]])
    """
    if check_tensor("x", x).dim() != 3:
        raise ValueError(f"split_heads expects (batch, length, features), got x of shape "
                         f"{tuple(x.shape)}")
    B, T, d = x.shape
    if n_heads <= 0 or d % n_heads != 0:
        raise ValueError(f"the feature size {d} is not divisible by n_heads={n_heads}")
    return x.reshape(B, T, n_heads, d // n_heads).transpose(1, 2)  # (B, h, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads back into one feature axis: the inverse of :func:`split_heads`.

    Args:
        x: ``(B, h, T, d_head)``.

    Returns:
        ``(B, T, h * d_head)``, head ``i`` in features ``i*d_head : (i+1)*d_head``.

    Example:
        >>> x = torch.randn(2, 3, 5, 4)
        >>> torch.equal(split_heads(merge_heads(x), 3), x)
        True
    """
    if check_tensor("x", x).dim() != 4:
        raise ValueError(f"merge_heads expects (batch, heads, length, d_head), got x of shape "
                         f"{tuple(x.shape)}")
    B, h, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_head)  # (B, T, d)


def multi_head_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor,
    n_heads: int, mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Multi-head attention from its four weight matrices (no biases), the math step by step.

    .. math:: \mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_h) W^{O\top}, \quad \mathrm{head}_i = \mathrm{Attention}(Q
              W_i^{Q\top}, K W_i^{K\top}, V W_i^{V\top})

    Weights follow ``nn.Linear``'s convention, the one of the whole course: shaped ``(out, in)``
    and applied as ``x @ w.T``; head ``i`` owns rows ``i*d_head:(i+1)*d_head`` of ``w_q``,
    ``w_k`` and ``w_v`` (``d_head = d / n_heads``), exactly the split of
    ``torch.nn.MultiheadAttention``. The scores of each head are divided by ``sqrt(d_head)``.

    Args:
        query: ``(B, T_q, d_q)``; key: ``(B, T_k, d_kv)``; value: ``(B, T_k, d_vv)``.
        w_q: ``(d, d_q)``, w_k: ``(d, d_kv)``, w_v: ``(d, d_vv)``: the projections to the
            attention width ``d``; w_o: ``(d_out, d)``.
        n_heads: ``h``, dividing ``d``.
        mask: boolean, broadcastable to ``(B, h, T_q, T_k)``, ``True`` = may attend.

    Returns:
        The output ``(B, T_q, d_out)`` and the weights ``(B, h, T_q, T_k)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> x, memory = torch.randn(1, 3, 4, generator=g), torch.randn(1, 5, 6, generator=g)
        >>> w_q, w_k, w_v, w_o = (torch.randn(*s, generator=g) for s in
        ...                       ((8, 4), (8, 6), (8, 6), (4, 8)))
        >>> out, w = multi_head_attention(x, memory, memory, w_q, w_k, w_v, w_o, n_heads=2)
        >>> out.shape, w.shape
        (torch.Size([1, 3, 4]), torch.Size([1, 2, 3, 5]))
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_float_tensor(name, t, ndim=3, shape="(batch, length, features)")
    for name, t in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        check_float_tensor(name, t, ndim=2, shape="(out, in)")
    d = w_q.shape[0]
    for name, w, t in (("w_q", w_q, query), ("w_k", w_k, key), ("w_v", w_v, value)):
        if w.dim() != 2 or w.shape != (d, t.shape[-1]):
            raise ValueError(f"{name} must have shape ({d}, {t.shape[-1]}) (out, in), applied as "
                             f"x @ {name}.T; got {tuple(w.shape)}")
    if w_o.dim() != 2 or w_o.shape[1] != d:
        raise ValueError(f"w_o must have shape (d_out, {d}) (out, in), applied as "
                         f"x @ w_o.T; got {tuple(w_o.shape)}")
    q = split_heads(query @ w_q.T, n_heads)  # (B, h, T_q, d_head)
    k = split_heads(key @ w_k.T, n_heads)    # (B, h, T_k, d_head)
    v = split_heads(value @ w_v.T, n_heads)  # (B, h, T_k, d_head)
    out, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    return merge_heads(out) @ w_o.T, weights  # (B, T_q, d_out), (B, h, T_q, T_k)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with per-head projections held as one ``d x d`` matrix each.

    .. math:: \mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_h) W^O, \quad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,
              K W_i^K, V W_i^V)

    The columns of ``q_proj`` for head ``i`` are rows ``i*d_head:(i+1)*d_head`` of its weight,
    exactly the split ``torch.nn.MultiheadAttention`` makes of ``in_proj_weight`` (whose three
    row blocks are ``q_proj``, ``k_proj`` and ``v_proj``).

    Args:
        d_model: model width ``d``.
        n_heads: number of heads ``h``; must divide ``d_model``.
        dropout: dropout on the attention weights during training.
        bias: whether the four projections have biases.
        impl: ``"fast"`` (fused SDPA) or ``"reference"`` (step by step). Asking for the weights
            (``need_weights=True``) always takes the reference path.

    Shapes:
        query ``(B, T_q, d)``, key and value ``(B, T_k, d)``; ``mask`` boolean, broadcastable to
        ``(B, h, T_q, T_k)``, ``True`` = may attend (see :func:`course_lib.attention.
        attention_mask` to build one from a key padding mask and a causal mask). Output
        ``(B, T_q, d)`` and, with ``need_weights``, the weights ``(B, h, T_q, T_k)``.

    Example:
        >>> mha = MultiHeadAttention(8, 2)
        >>> x = torch.randn(1, 5, 8)
        >>> out, w = mha(x, x, x, need_weights=True)
        >>> out.shape, w.shape
        (torch.Size([1, 5, 8]), torch.Size([1, 2, 5, 5]))
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 impl: Impl = "fast") -> None:
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; each head needs "
                f"d_model / n_heads features"
            )
        if impl not in ("reference", "fast"):
            raise ValueError(f"impl must be 'reference' or 'fast', got {impl!r}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.impl = impl
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; see the class docstring for shapes."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_float_tensor(name, t)
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have shape (batch, length, d_model={self.d_model}), "
                                 f"got {tuple(t.shape)}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length; got {key.shape[1]} "
                             f"(key {tuple(key.shape)}) and {value.shape[1]} "
                             f"(value {tuple(value.shape)})")
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, h, T_q, d_head)
        k = split_heads(self.k_proj(key), self.n_heads)    # (B, h, T_k, d_head)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, h, T_k, d_head)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, impl="reference",
                                                        dropout_p=p, return_weights=True)
        else:
            out = scaled_dot_product_attention(q, k, v, mask, impl=self.impl, dropout_p=p)
        return self.out_proj(merge_heads(out)), weights  # (B, T_q, d), (B, h, T_q, T_k)
