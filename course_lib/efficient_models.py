r"""Chapter 2's recall model with linear attention and with entmax attention (a learnable alpha).

Taught in chapter 6, sections 3 and 6. :class:`course_lib.longrange.AttentionModel` reads the
associative recall task with one multi-head attention layer from the query token to the whole
sequence. The two models here keep everything else of it (embeddings, the four projections of
:class:`course_lib.multihead.MultiHeadAttention`, the residual connection, the readout) and change
only how a head weighs the keys:

- :class:`LinearAttentionModel`: :math:`\mathrm{sim}(q, k) = \phi(q)^\top \phi(k)` with
  :math:`\phi(x) = \mathrm{elu}(x) + 1` (Katharopoulos et al., 2020), computed by
  :func:`course_lib.linear_attention.linear_attention`. The query is the last token, so causal and
  non-causal attention coincide for it. Same parameters, same count, as the softmax model.
- :class:`EntmaxAttentionModel`: :math:`\alpha`-entmax weights (Correia et al., 2019), computed
  by :func:`course_lib.entmax.entmax_attention`, with one learnable :math:`\alpha_h = 1 +
  \mathrm{sigmoid}(a_h)` per head, so :math:`\alpha_h \in (1, 2]`: between softmax
  (:math:`\alpha \to 1`) and sparsemax (:math:`\alpha = 2`). It has ``n_heads`` parameters more
  than the softmax model.

Both take the same inputs and train with :func:`course_lib.longrange.train_recall`.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.entmax import entmax_attention
from course_lib.linear_attention import elu_feature_map, linear_attention
from course_lib.longrange import AttentionModel, RecallConfig
from course_lib.multihead import merge_heads, split_heads

MIN_EXCESS = 1e-3  # EntmaxAttentionModel's alpha is at least 1 + MIN_EXCESS


class _QueryAttentionModel(AttentionModel):
    """The softmax model's parts, with :meth:`weigh` (how a head mixes the values) left open."""

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The query's and the sequence's ``q``, ``k``, ``v``, each ``(B, h, T, d_head)``."""
        mha = self.attention
        q = split_heads(mha.q_proj(x[:, -1:]), mha.n_heads)  # (B, h, 1, d_head)
        k = split_heads(mha.k_proj(x), mha.n_heads)          # (B, h, T, d_head)
        v = split_heads(mha.v_proj(x), mha.n_heads)          # (B, h, T, d_head)
        return q, k, v

    def weigh(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per head: the output ``(B, h, 1, d_head)`` and the weights ``(B, h, 1, T)``."""
        raise NotImplementedError

    def attend(self, x: torch.Tensor, need_weights: bool = False,
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, length, d_model={self.d_model}), got "
                             f"{tuple(x.shape)}")
        out, weights = self.weigh(*self.heads(x))
        out = self.attention.out_proj(merge_heads(out))      # (B, 1, d)
        return (x[:, -1:] + out)[:, 0], weights if need_weights else None  # (B, d), (B, h, 1, T)


class LinearAttentionModel(_QueryAttentionModel):
    r"""The recall model with linear attention, :math:`\phi(x) = \mathrm{elu}(x) + 1`.

    Head ``h`` returns :math:`\phi(q)^\top S / \phi(q)^\top z` with :math:`S = \sum_j \phi(k_j)
    v_j^\top`, :math:`z = \sum_j \phi(k_j)`; its weights are :math:`\phi(q)^\top \phi(k_j) /
    \phi(q)^\top z`. Parameters: exactly those of :class:`course_lib.longrange.AttentionModel`.

    Args:
        config: the recall task.
        d_model: width; n_heads: heads (must divide ``d_model``).

    Example:
        >>> from course_lib.longrange import make_recall_batch
        >>> config = RecallConfig(length=10, n_pairs=3)
        >>> model = LinearAttentionModel(config, d_model=16, n_heads=2)
        >>> sum(p.numel() for p in model.parameters()) == sum(
        ...     p.numel() for p in AttentionModel(config, d_model=16, n_heads=2).parameters())
        True
        >>> b = make_recall_batch(config, 4, torch.Generator().manual_seed(0))
        >>> model(b.keys, b.values).shape, model.attention_weights(b.keys, b.values).shape
        (torch.Size([4, 16]), torch.Size([4, 2, 10]))
    """

    def weigh(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              ) -> tuple[torch.Tensor, torch.Tensor]:
        out = linear_attention(q, k, v)                      # (B, h, 1, d_head)
        sim = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)  # (B, h, 1, T)
        return out, sim / sim.sum(dim=-1, keepdim=True)


class EntmaxAttentionModel(_QueryAttentionModel):
    r"""The recall model with :math:`\alpha`-entmax attention, one learnable alpha per head.

    :math:`\alpha_h = 1 + \mathrm{sigmoid}(a_h)`, :math:`a_h` learned (``alpha_logit``), so
    every head's :math:`\alpha` stays in :math:`(1, 2]` (at least ``1 + MIN_EXCESS``); weights by
    bisection (:func:`course_lib.entmax.entmax_bisect`), which also differentiates in
    :math:`\alpha`.

    Args:
        config: the recall task.
        d_model: width; n_heads: heads (must divide ``d_model``).
        alpha: the initial alpha of every head, in ``(1, 2)`` (1.5: 1.5-entmax).

    Example:
        >>> from course_lib.longrange import make_recall_batch
        >>> config = RecallConfig(length=10, n_pairs=3)
        >>> model = EntmaxAttentionModel(config, d_model=16, n_heads=2)
        >>> model.alpha
        tensor([1.5000, 1.5000], grad_fn=<AddBackward0>)
        >>> b = make_recall_batch(config, 4, torch.Generator().manual_seed(0))
        >>> w = model.attention_weights(b.keys, b.values)  # (B, h, T), rows sum to one
        >>> w.shape, bool(torch.allclose(w.sum(-1), torch.ones(4, 2)))
        (torch.Size([4, 2, 10]), True)
    """

    def __init__(self, config: RecallConfig, d_model: int = 64, n_heads: int = 4,
                 alpha: float = 1.5) -> None:
        if not 1.0 < alpha < 2.0:
            raise ValueError(f"alpha must lie in (1, 2) (1 + sigmoid of a real), got {alpha}")
        super().__init__(config, d_model, n_heads)
        logit = torch.logit(torch.tensor(alpha - 1.0)).item()
        self.alpha_logit = nn.Parameter(torch.full((n_heads,), logit))

    @property
    def alpha(self) -> torch.Tensor:
        """The alpha of each head, ``(n_heads,)``, in ``[1 + MIN_EXCESS, 2]``."""
        # sigmoid(a) rounds to 0 for a below about -17 in float32; alpha = 1 would be softmax,
        # which entmax_bisect rejects, so the excess over 1 is floored.
        return 1.0 + torch.sigmoid(self.alpha_logit).clamp(min=MIN_EXCESS)

    def weigh(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              ) -> tuple[torch.Tensor, torch.Tensor]:
        alpha = self.alpha.to(q.dtype)[:, None, None]        # (h, 1, 1): one per head
        return entmax_attention(q, k, v, alpha=alpha)
