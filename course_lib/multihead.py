"""Multi-head attention (Vaswani et al., 2017, section 3.2.2).

Taught in chapter 2, section 3. Tested against ``torch.nn.MultiheadAttention`` with copied weights.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import Impl, scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with per-head projections held as one ``d x d`` matrix each.

    .. math:: \mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_h) W^O, \quad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,
              K W_i^K, V W_i^V)

    The columns of ``q_proj`` for head ``i`` are rows ``i*d_head:(i+1)*d_head`` of its weight,
    exactly the split ``torch.nn.MultiheadAttention`` makes of ``in_proj_weight``.

    Args:
        d_model: model width ``d``.
        n_heads: number of heads ``h``; must divide ``d_model``.
        dropout: dropout on the attention weights during training.
        bias: whether the four projections have biases.
        impl: ``"fast"`` (fused SDPA) or ``"reference"`` (step by step, can return weights).

    Shapes:
        query ``(B, T_q, d)``, key and value ``(B, T_k, d)``; ``mask`` boolean, broadcastable to
        ``(B, h, T_q, T_k)``, ``True`` = may attend. Output ``(B, T_q, d)`` and, with
        ``need_weights``, the weights ``(B, h, T_q, T_k)``.

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
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.impl = impl
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have shape (batch, length, d_model={self.d_model}), "
                                 f"got {tuple(t.shape)}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length; got {key.shape[1]} and "
                             f"{value.shape[1]}")
        B, T_q, _ = query.shape
        q = self._split(self.q_proj(query))  # (B, h, T_q, d_head)
        k = self._split(self.k_proj(key))    # (B, h, T_k, d_head)
        v = self._split(self.v_proj(value))  # (B, h, T_k, d_head)
        p = self.dropout if self.training else 0.0
        impl = "reference" if need_weights else self.impl
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, impl="reference",
                                                        dropout_p=p, return_weights=True)
        else:
            out = scaled_dot_product_attention(q, k, v, mask, impl=impl, dropout_p=p)
            weights = None
        out = out.transpose(1, 2).reshape(B, T_q, self.d_model)  # (B, T_q, d)
        return self.out_proj(out), weights
