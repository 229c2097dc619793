r"""Attention as alignment: kernel regression, Bahdanau and Luong scores, the context vector.

Taught in chapter 1, sections 4 and 5. The masked softmax comes from :mod:`course_lib.attention`.

Attention in one sentence: a query :math:`q` looks at keys :math:`k_1, \dots, k_n`, turns a score
:math:`a(q, k_j)` for each into weights with a softmax, and returns the weighted average of the
values :math:`v_j`:

.. math:: \alpha_j = \frac{\exp a(q, k_j)}{\sum_{j'} \exp a(q, k_{j'})}, \qquad
          c = \sum_j \alpha_j v_j .

The scores of this module:

* Gaussian kernel (Nadaraya, 1964; Watson, 1964): :math:`a(q, k) = -(q - k)^2 / (2 h^2)`.
* Additive (Bahdanau et al., 2014): :math:`a(q, k) = v^\top \tanh(W_q q + W_k k)`.
* Dot (Luong et al., 2015): :math:`a(q, k) = q^\top k`.
* General (Luong et al., 2015): :math:`a(q, k) = q^\top W k`.

Shapes: queries ``(B, T_q, d_q)``, keys ``(B, T_k, d_k)``, values ``(B, T_k, d_v)``, scores and
weights ``(B, T_q, T_k)``; masks are boolean, broadcastable to the scores, ``True`` = may attend
(a padding mask ``(B, T_k)`` of the keys becomes ``mask[:, None, :]``).
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import masked_softmax
from course_lib.checks import check_float_tensor


def _check_batched(name: str, x: torch.Tensor) -> None:
    check_float_tensor(name, x)
    if x.dim() != 3:
        raise ValueError(f"{name} must be (batch, length, features), got shape {tuple(x.shape)}")


def nadaraya_watson(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    bandwidth: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Nadaraya-Watson kernel regression with a Gaussian kernel: attention without parameters.

    .. math:: \hat f(q) = \sum_j \alpha_j(q)\, v_j, \qquad
              \alpha_j(q) = \operatorname{softmax}_j\!\left(-\frac{(q - k_j)^2}{2h^2}\right)

    Args:
        queries: ``(m,)`` points where the regression is evaluated.
        keys: ``(n,)`` the sample positions :math:`x_j`.
        values: ``(n,)`` or ``(n, d)`` the sample values :math:`y_j`.
        bandwidth: the kernel width :math:`h > 0`; small: wiggly, large: smooth.

    Returns:
        ``(predictions (m,) or (m, d), weights (m, n))``; each weight row sums to one.

    Example:
        >>> pred, w = nadaraya_watson(torch.tensor([0.0]), torch.tensor([-1.0, 1.0]),
        ...                           torch.tensor([2.0, 4.0]))
        >>> pred, w  # the query is as close to both keys: the average of the values
        (tensor([3.]), tensor([[0.5000, 0.5000]]))
    """
    check_float_tensor("queries", queries)
    check_float_tensor("keys", keys)
    check_float_tensor("values", values, min_ndim=1, shape="(n,) or (n, d)")
    if queries.dim() != 1 or keys.dim() != 1:
        raise ValueError(f"queries and keys must be 1-D, got {tuple(queries.shape)} and "
                         f"{tuple(keys.shape)}")
    if values.shape[0] != keys.shape[0]:
        raise ValueError(f"{keys.shape[0]} keys but {values.shape[0]} values")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    scores = -((queries[:, None] - keys[None, :]) ** 2) / (2 * bandwidth ** 2)  # (m, n)
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def additive_score(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                   v: torch.Tensor) -> torch.Tensor:
    r"""Bahdanau's additive score, for every query and key.

    .. math:: a(q_i, k_j) = v^\top \tanh(W_q q_i + W_k k_j)

    The weights follow ``nn.Linear``'s convention: :math:`W_q q` is ``query @ W_q.T``.

    Args:
        query: ``(B, T_q, d_q)`` (in the decoder, the previous state :math:`s_{i-1}`).
        keys: ``(B, T_k, d_k)`` (the encoder's annotations :math:`h_j`).
        W_q: ``(d_a, d_q)``.
        W_k: ``(d_a, d_k)``.
        v: ``(d_a,)``.

    Returns:
        Scores ``(B, T_q, T_k)``.

    Example:
        >>> q, k = torch.zeros(1, 1, 2), torch.zeros(1, 3, 2)
        >>> additive_score(q, k, torch.eye(2), torch.eye(2), torch.ones(2))  # tanh(0) = 0
        tensor([[[0., 0., 0.]]])
    """
    _check_batched("query", query)
    _check_batched("keys", keys)
    check_float_tensor("W_q", W_q, ndim=2, shape="(d_a, d_q)")
    check_float_tensor("W_k", W_k, ndim=2, shape="(d_a, d_k)")
    check_float_tensor("v", v, ndim=1, shape="(d_a,)")
    if W_q.shape[1] != query.shape[-1] or W_k.shape[1] != keys.shape[-1]:
        raise ValueError(f"W_q {tuple(W_q.shape)} must be (d_a, d_q={query.shape[-1]}) and W_k "
                         f"{tuple(W_k.shape)} must be (d_a, d_k={keys.shape[-1]})")
    if W_q.shape[0] != W_k.shape[0] or v.shape != (W_q.shape[0],):
        raise ValueError(f"W_q {tuple(W_q.shape)}, W_k {tuple(W_k.shape)} and v {tuple(v.shape)} "
                         "must share the attention size d_a")
    q = query @ W_q.T  # (B, T_q, d_a)
    k = keys @ W_k.T  # (B, T_k, d_a)
    return torch.tanh(q[:, :, None, :] + k[:, None, :, :]) @ v  # (B, T_q, T_k)


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    r"""Luong's dot score :math:`a(q_i, k_j) = q_i^\top k_j`, for every query and key.

    Shapes: ``(B, T_q, d)`` and ``(B, T_k, d)`` -> ``(B, T_q, T_k)``.

    Example:
        >>> dot_score(torch.ones(1, 1, 2), torch.tensor([[[1.0, 2.0], [0.0, -1.0]]]))
        tensor([[[ 3., -1.]]])
    """
    _check_batched("query", query)
    _check_batched("keys", keys)
    if query.shape[-1] != keys.shape[-1]:
        raise ValueError(f"the dot score needs queries and keys of one size; got "
                         f"{query.shape[-1]} and {keys.shape[-1]}")
    return query @ keys.transpose(1, 2)  # (B, T_q, T_k)


def general_score(query: torch.Tensor, keys: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    r"""Luong's general score :math:`a(q_i, k_j) = q_i^\top W k_j`, with ``W`` ``(d_q, d_k)``.

    Example:
        >>> general_score(torch.ones(1, 1, 2), torch.ones(1, 1, 3), torch.ones(2, 3))
        tensor([[[6.]]])
    """
    _check_batched("query", query)
    _check_batched("keys", keys)
    check_float_tensor("W", W, ndim=2, shape="(d_q, d_k)")
    if W.shape != (query.shape[-1], keys.shape[-1]):
        raise ValueError(f"W must be (d_q, d_k) = ({query.shape[-1]}, {keys.shape[-1]}), got "
                         f"{tuple(W.shape)}")
    return query @ W @ keys.transpose(1, 2)  # (B, T_q, T_k)


def context_vector(scores: torch.Tensor, values: torch.Tensor,
                   mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention weights from scores, and the context: the weighted sum of the values.

    .. math:: \alpha_{ij} = \frac{m_{ij} \exp a_{ij}}{\sum_{j'} m_{ij'} \exp a_{ij'}}, \qquad
              c_i = \sum_j \alpha_{ij} v_j

    Padded keys (``mask`` False) get weight exactly zero; a query with no key at all gets a zero
    context (never NaN).

    Args:
        scores: ``(B, T_q, T_k)``.
        values: ``(B, T_k, d_v)``.
        mask: boolean, broadcastable to ``(B, T_q, T_k)``, ``True`` = may attend.

    Returns:
        ``(context (B, T_q, d_v), weights (B, T_q, T_k))``.

    Example:
        >>> ctx, w = context_vector(torch.zeros(1, 1, 3), torch.tensor([[[1.0], [2.0], [9.0]]]),
        ...                         torch.tensor([[[True, True, False]]]))
        >>> ctx, w
        (tensor([[[1.5000]]]), tensor([[[0.5000, 0.5000, 0.0000]]]))
    """
    _check_batched("scores", scores)
    _check_batched("values", values)
    if scores.shape[-1] != values.shape[1]:
        raise ValueError(f"scores have {scores.shape[-1]} keys but values have {values.shape[1]} "
                         f"(scores {tuple(scores.shape)}, values {tuple(values.shape)})")
    weights = masked_softmax(scores, mask)  # (B, T_q, T_k)
    return weights @ values, weights  # (B, T_q, d_v)


class AdditiveAttention(nn.Module):
    r"""Bahdanau's attention as a module: additive scores, masked softmax, context vector.

    Args:
        query_dim: :math:`d_q`.
        key_dim: :math:`d_k` (the values are the keys, as in Bahdanau et al.).
        attn_dim: :math:`d_a`, the size of the hidden layer of the score.

    Shapes: ``forward(query (B, T_q, d_q), keys (B, T_k, d_k), mask)`` ->
    ``(context (B, T_q, d_k), weights (B, T_q, T_k))``.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Parameter(torch.empty(attn_dim).uniform_(-attn_dim ** -0.5, attn_dim ** -0.5))

    def forward(self, query: torch.Tensor, keys: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        scores = additive_score(query, keys, self.W_q.weight, self.W_k.weight, self.v)
        return context_vector(scores, keys, mask)


class LuongAttention(nn.Module):
    r"""Luong's multiplicative attention, ``"dot"`` (no parameters) or ``"general"`` (a matrix W).

    Shapes: ``forward(query (B, T_q, d_q), keys (B, T_k, d_k), mask)`` ->
    ``(context (B, T_q, d_k), weights (B, T_q, T_k))``; ``"dot"`` needs ``d_q == d_k``.
    """

    def __init__(self, query_dim: int, key_dim: int, score: str = "general") -> None:
        super().__init__()
        if score not in ("dot", "general"):
            raise ValueError(f"score must be 'dot' or 'general', got {score!r}")
        if score == "dot" and query_dim != key_dim:
            raise ValueError(f"the dot score needs query_dim == key_dim, got {query_dim}, "
                             f"{key_dim}")
        self.score = score
        self.W = nn.Parameter(torch.empty(query_dim, key_dim)) if score == "general" else None
        if self.W is not None:
            nn.init.xavier_uniform_(self.W)

    def forward(self, query: torch.Tensor, keys: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.W is None:
            scores = dot_score(query, keys)
        else:
            scores = general_score(query, keys, self.W)
        return context_vector(scores, keys, mask)
