r"""Mixture of experts: top-k routing, the load-balancing loss, capacity and dropped tokens.

Taught in chapter 7 (the modern decoder), section 6. Shazeer et al. (2017), "Outrageously Large
Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer"; Fedus et al. (2021), "Switch
Transformers"; Jiang et al. (2024), "Mixtral of Experts". A router (one linear map ``gate``,
:math:`d \to E`) scores the :math:`E` experts for every token; the token goes to its top
:math:`k` experts, whose outputs are mixed with the router's probabilities of those :math:`k`
*renormalised* to sum to one (Mixtral):

.. math:: p = \mathrm{softmax}(x W_g^\top), \quad S = \mathrm{top}_k(p), \quad
          y = \sum_{e \in S} \frac{p_e}{\sum_{e' \in S} p_{e'}}\, \mathrm{SwiGLU}_e(x)

Only :math:`k` of the :math:`E` expert MLPs run per token: the *active* parameters are a fraction
of the total. Without pressure the router collapses onto a few experts; the *load-balancing loss*
(Switch, in Mixtral's top-k form) is :math:`E \sum_e f_e P_e` with :math:`f_e` the share of tokens
routed to expert :math:`e` (counted over the top :math:`k`) and :math:`P_e` its mean router
probability; it is smallest, :math:`k`, when both are uniform.

Parameter names are those of Hugging Face's ``MixtralSparseMoeBlock`` (transformers 5):
``gate.weight`` ``(E, d)``, ``experts.gate_up_proj`` ``(E, 2I, d)`` (the gate's rows, then the
up projection's) and ``experts.down_proj`` ``(E, d, I)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks import (
    check_float_tensor,
    check_ids,
    check_int,
    check_positive,
    check_same_dtype,
)


def _check_router(router_logits: torch.Tensor, k: int) -> None:
    check_float_tensor("router_logits", router_logits, ndim=2, shape="(N, E)")
    if not 1 <= check_int("k", k) <= router_logits.shape[-1]:
        raise ValueError(f"k must lie between 1 and the {router_logits.shape[-1]} experts, got {k}")


def route(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Top-``k`` routing with renormalised gates: ``(N, E)`` logits -> weights and expert ids.

    Returns:
        ``(weights, experts)``, both ``(N, k)``: the softmax probabilities of each token's ``k``
        best experts divided by their sum (rows sum to one), in decreasing order, and the experts'
        indices.

    Example:
        >>> w, e = route(torch.log(torch.tensor([[0.1, 0.6, 0.3]])), k=2)
        >>> e.tolist(), [round(v, 4) for v in w[0].tolist()]
        ([[1, 2]], [0.6667, 0.3333])
    """
    _check_router(router_logits, k)
    probs = router_logits.softmax(dim=-1)
    top, experts = probs.topk(k, dim=-1)
    return top / top.sum(dim=-1, keepdim=True), experts


def load_balancing_loss(router_logits: torch.Tensor, k: int) -> torch.Tensor:
    r"""Switch's auxiliary loss in Mixtral's top-k form: :math:`E \sum_e f_e P_e`.

    :math:`f_e` is the number of (token, slot) assignments to expert :math:`e` divided by the
    number of tokens :math:`N` (so :math:`\sum_e f_e = k`), :math:`P_e` the mean router probability
    of expert :math:`e`. Minimum :math:`k` under uniform routing; :math:`kE` when every token's
    probability sits on one expert.

    Args:
        router_logits: ``(N, E)``.
        k: experts per token.

    Example:
        >>> float(load_balancing_loss(torch.zeros(6, 4), k=2))  # uniform probabilities
        2.0
    """
    _check_router(router_logits, k)
    n, e = router_logits.shape
    if n == 0:
        raise ValueError("router_logits hold no token: the loss of an empty batch is 0/0")
    probs = router_logits.softmax(dim=-1)
    experts = probs.topk(k, dim=-1).indices  # (N, k)
    f = torch.zeros(e, dtype=probs.dtype, device=probs.device).scatter_add_(
        0, experts.flatten(), torch.ones(experts.numel(), dtype=probs.dtype,
                                         device=probs.device)) / n  # (E,)
    return e * (f * probs.mean(dim=0)).sum()


def expert_counts(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """How many (token, slot) assignments each expert received: ``(N, k)`` ids -> ``(E,)`` long.

    Example:
        >>> expert_counts(torch.tensor([[0, 1], [0, 2]]), 4).tolist()
        [2, 1, 1, 0]
    """
    check_int("n_experts", n_experts, minimum=1)
    check_ids("experts", experts, n_experts, ndim=2, shape="(N, k)")
    return torch.bincount(experts.flatten(), minlength=n_experts)


def capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    r"""Switch's expert capacity: :math:`\lceil c\, k N / E \rceil` slots per expert.

    Example:
        >>> capacity(n_tokens=100, n_experts=8, k=2, capacity_factor=1.25)
        32
    """
    check_int("n_tokens", n_tokens, minimum=0)
    check_int("n_experts", n_experts, minimum=1)
    if not 1 <= check_int("k", k) <= n_experts:
        raise ValueError(f"k must lie between 1 and the {n_experts} experts, got {k}")
    check_positive("capacity_factor", capacity_factor)
    return math.ceil(capacity_factor * k * n_tokens / n_experts)


def dropped_fraction(experts: torch.Tensor, n_experts: int, capacity_factor: float) -> float:
    """The share of (token, slot) assignments beyond their expert's capacity (dropped, in order).

    With a capacity, an expert processes its first ``capacity`` assignments (in token order) and
    drops the rest; those tokens pass through the layer on the residual stream only.

    Example:
        >>> dropped_fraction(torch.tensor([[0], [0], [0], [1]]), 2, capacity_factor=1.0)
        0.25
    """
    check_int("n_experts", n_experts, minimum=1)
    check_ids("experts", experts, n_experts, ndim=2, shape="(N, k)")
    if experts.numel() == 0:
        raise ValueError(f"experts holds no assignment (shape {tuple(experts.shape)}): the "
                         "dropped share of nothing is 0/0")
    check_positive("capacity_factor", capacity_factor)
    n, k = experts.shape
    cap = capacity(n, n_experts, k, capacity_factor)
    over = (expert_counts(experts, n_experts) - cap).clamp(min=0)
    return float(over.sum()) / experts.numel()


class Experts(nn.Module):
    """``E`` SwiGLU MLPs stored as 3-D tensors (Hugging Face's ``MixtralExperts`` layout)."""

    def __init__(self, n_experts: int, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(n_experts, hidden_size, intermediate_size))
        std = 0.02
        nn.init.normal_(self.gate_up_proj, std=std)
        nn.init.normal_(self.down_proj, std=std)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                ) -> torch.Tensor:
        """``x`` ``(N, d)``, ``weights``/``experts`` ``(N, k)`` -> ``(N, d)``: each expert runs its
        tokens."""
        n_experts, _, d = self.gate_up_proj.shape
        check_float_tensor("x", x, ndim=2, shape=f"(N, d={d})")
        check_float_tensor("weights", weights, ndim=2, shape="(N, k)")
        check_same_dtype(x=x, weights=weights)
        check_ids("experts", experts, n_experts, ndim=2, shape="(N, k)")
        if x.shape[1] != d or weights.shape != experts.shape or experts.shape[0] != x.shape[0]:
            raise ValueError(f"x (N, d={d}), weights and experts (N, k) do not fit: "
                             f"{tuple(x.shape)}, {tuple(weights.shape)}, {tuple(experts.shape)}")
        out = torch.zeros_like(x)
        for e in torch.unique(experts).tolist():
            token, slot = torch.where(experts == e)
            gate, up = F.linear(x[token], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[e])  # (n_e, d)
            out.index_add_(0, token, y * weights[token, slot, None])
        return out


class SparseMoeBlock(nn.Module):
    """A Mixtral MoE layer: ``gate`` routes each token to ``k`` of ``E`` SwiGLU ``experts``.

    ``forward`` maps ``(B, T, d) -> (B, T, d)`` and keeps the router's logits ``(B*T, E)`` in
    ``router_logits`` (for :func:`load_balancing_loss` and the usage plots).

    Example:
        >>> moe = SparseMoeBlock(hidden_size=8, intermediate_size=16, n_experts=4, k=2)
        >>> moe(torch.randn(2, 3, 8)).shape, moe.router_logits.shape
        (torch.Size([2, 3, 8]), torch.Size([6, 4]))
        >>> active_params(moe), sum(p.numel() for p in moe.parameters())  # 2 of 4 experts run
        (800, 1568)
    """

    def __init__(self, hidden_size: int, intermediate_size: int, n_experts: int, k: int) -> None:
        super().__init__()
        self.k, self.n_experts = k, n_experts
        self.gate = nn.Linear(hidden_size, n_experts, bias=False)
        self.experts = Experts(n_experts, hidden_size, intermediate_size)
        self.router_logits: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.gate.in_features
        check_float_tensor("x", x, min_ndim=1, shape=f"(..., d={d})")
        if x.shape[-1] != d:
            raise ValueError(f"x must have shape (..., d={d}), got shape {tuple(x.shape)}")
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, d)
        logits = self.gate(flat)  # (N, E)
        self.router_logits = logits
        weights, experts = route(logits, self.k)
        out: torch.Tensor = self.experts(flat, weights.to(x.dtype), experts)  # (N, d)
        return out.reshape(shape)


def active_params(moe: SparseMoeBlock) -> int:
    """Parameters one token uses: the router and ``k`` of the ``E`` experts."""
    if not isinstance(moe, SparseMoeBlock):
        raise TypeError(f"moe must be a SparseMoeBlock, got {type(moe).__name__}")
    per_expert = (moe.experts.gate_up_proj[0].numel() + moe.experts.down_proj[0].numel())
    return moe.gate.weight.numel() + moe.k * per_expert
