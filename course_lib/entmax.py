r"""Sparse attention weights: sparsemax and alpha-entmax, with their gradients.

Taught in chapter 6, section 6. Martins and Astudillo (2016) define sparsemax, the Euclidean
projection of the scores onto the probability simplex; Peters, Niculae and Martins (2019) and
Correia, Niculae and Martins (2019), "Adaptively Sparse Transformers", generalise it to
alpha-entmax, which for :math:`\alpha > 1` is

.. math:: \alpha\text{-entmax}(z)_i = \left[(\alpha - 1) z_i - \tau\right]_+^{1/(\alpha-1)},
          \qquad \tau \text{ such that } \textstyle\sum_i p_i = 1

(:math:`\alpha \to 1` gives softmax, :math:`\alpha = 2` sparsemax). Every weight below the
threshold is *exactly* zero. On the support :math:`S = \{i : p_i > 0\}`, with
:math:`g_i = p_i^{2 - \alpha}`, the Jacobian is :math:`\mathrm{diag}(g) - g g^\top / \sum_i g_i`, so
backward maps an output gradient :math:`\bar p` to :math:`g \odot \bar p - g\, (g^\top \bar p) /
\sum_i g_i`; and with :math:`\tau' = (\sum_i g_i z_i - \sum_i p_i \log p_i)/\sum_i g_i`,

.. math:: \frac{\partial p_i}{\partial \alpha}
          = \frac{g_i (z_i - \tau') - p_i \log p_i}{\alpha - 1},

which lets each head learn its own :math:`\alpha`. Sparsemax and 1.5-entmax find :math:`\tau`
exactly by sorting; other :math:`\alpha` by bisection. Peer: the ``entmax`` package (same authors).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from course_lib.checks import check_float_tensor, check_same_dtype, check_tensor

Alpha = float | torch.Tensor


def _sparsemax_forward(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax over the last dimension (``z`` finite)."""
    zs = torch.sort(z, dim=-1, descending=True).values               # (..., n)
    cs = torch.cumsum(zs, dim=-1) - 1.0
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    support = (r * zs > cs).sum(dim=-1, keepdim=True)                # k(z), >= 1
    tau = cs.gather(-1, support - 1) / support.to(z.dtype)           # (..., 1)
    return torch.clamp(z - tau, min=0.0)


def _entmax15_forward(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax over the last dimension: ``p = [z/2 - tau]_+^2`` with tau from the sorted scores.

    On a support of the ``k`` largest ``x = z/2``, :math:`\\sum (x_i - \\tau)^2 = 1` is a quadratic
    in tau: :math:`\\tau = \\bar x - \\sqrt{(1 - k\\,(\\overline{x^2} - \\bar x^2))/k}`; the
    support is the largest ``k`` whose tau lies below its ``k``-th value.
    """
    x = z / 2
    x = x - x.amax(dim=-1, keepdim=True)                             # stability: max is 0
    xs = torch.sort(x, dim=-1, descending=True).values
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    mean = torch.cumsum(xs, dim=-1) / r
    mean_sq = torch.cumsum(xs * xs, dim=-1) / r
    spread = r * (mean_sq - mean * mean)                             # sum (x - mean)^2
    tau = mean - torch.sqrt(torch.clamp((1 - spread) / r, min=0.0))
    support = (tau <= xs).sum(dim=-1, keepdim=True)
    tau_star = tau.gather(-1, support - 1)
    return torch.clamp(x - tau_star, min=0.0) ** 2


def _bisect_forward(z: torch.Tensor, alpha: torch.Tensor, n_iter: int) -> torch.Tensor:
    """alpha-entmax over the last dimension by bisection on tau; ``alpha`` ``(..., 1)``."""
    am1 = alpha - 1
    x = am1 * z
    top = x.amax(dim=-1, keepdim=True)
    lo = top - 1.0                                 # p_max = 1 here: the sum is at least 1
    hi = top - (1.0 / z.shape[-1]) ** am1          # every p_i <= 1/n here: the sum is at most 1
    for _ in range(n_iter):
        mid = (lo + hi) / 2
        total = (torch.clamp(x - mid, min=0.0) ** (1 / am1)).sum(dim=-1, keepdim=True)
        above = total >= 1
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    p = torch.clamp(x - lo, min=0.0) ** (1 / am1)
    return p / p.sum(dim=-1, keepdim=True)


def _entmax_backward(p: torch.Tensor, grad: torch.Tensor, alpha: float | torch.Tensor,
                     ) -> torch.Tensor:
    """``g * grad - g (g . grad) / sum g`` with ``g = p^(2 - alpha)`` on the support, 0
    elsewhere."""
    g = torch.where(p > 0, p ** (2 - alpha), torch.zeros_like(p))
    gg = g * grad
    return gg - g * gg.sum(dim=-1, keepdim=True) / g.sum(dim=-1, keepdim=True)


class SparsemaxFunction(torch.autograd.Function):
    """Sparsemax over the last dimension, with its backward (:math:`g = 1` on the support)."""

    @staticmethod
    def forward(ctx: FunctionCtx, z: torch.Tensor) -> torch.Tensor:
        p = _sparsemax_forward(z)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        return _entmax_backward(p, grad, 2.0)


class Entmax15Function(torch.autograd.Function):
    """1.5-entmax over the last dimension, with its backward (:math:`g = \\sqrt{p}`)."""

    @staticmethod
    def forward(ctx: FunctionCtx, z: torch.Tensor) -> torch.Tensor:
        p = _entmax15_forward(z)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        return _entmax_backward(p, grad, 1.5)


class EntmaxBisectFunction(torch.autograd.Function):
    """alpha-entmax over the last dimension by bisection; gradients for ``z`` and ``alpha``."""

    @staticmethod
    def forward(ctx: FunctionCtx, z: torch.Tensor, alpha: torch.Tensor, n_iter: int,
                ) -> torch.Tensor:
        a = alpha.expand(*z.shape[:-1], 1)
        p = _bisect_forward(z, a, n_iter)
        ctx.save_for_backward(z, p, alpha)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        z, p, alpha = ctx.saved_tensors
        a = alpha.expand(*z.shape[:-1], 1)
        d_z = _entmax_backward(p, grad, a)
        d_alpha = None
        if ctx.needs_input_grad[1]:
            on = p > 0
            g = torch.where(on, p ** (2 - a), torch.zeros_like(p))
            plogp = torch.where(on, p * torch.log(torch.where(on, p, torch.ones_like(p))),
                                torch.zeros_like(p))
            tau_prime = ((g * z).sum(-1, keepdim=True) - plogp.sum(-1, keepdim=True)) \
                / g.sum(-1, keepdim=True)
            dp_da = torch.where(on, g * (z - tau_prime) - plogp, torch.zeros_like(p)) / (a - 1)
            d_alpha = (grad * dp_da).sum(dim=-1, keepdim=True)       # (..., 1)
            while d_alpha.dim() > alpha.dim():                       # back to alpha's shape
                d_alpha = d_alpha.sum(dim=0)
            for i, n in enumerate(alpha.shape):
                if n == 1 and d_alpha.shape[i] != 1:
                    d_alpha = d_alpha.sum(dim=i, keepdim=True)
        return d_z, d_alpha, None


def _check_scores(z: torch.Tensor, dim: int) -> int:
    check_tensor("z", z)
    if not z.is_floating_point():
        raise TypeError(f"z: scores must be floating point, got {z.dtype}")
    if z.dim() == 0:
        raise ValueError("z: scores must have at least one dimension")
    if not -z.dim() <= dim < z.dim():
        raise ValueError(f"z: dim={dim} is out of range for scores of shape {tuple(z.shape)}")
    if z.shape[dim] == 0:
        raise ValueError(f"z: dimension {dim} of the scores {tuple(z.shape)} is empty")
    if not bool(torch.isfinite(z).all()):
        raise ValueError("z: scores must be finite; to mask positions use entmax_attention's "
                         "mask")
    return dim % z.dim()


def sparsemax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""Sparsemax (Martins and Astudillo, 2016): the closest point of the simplex to ``z``.

    .. math:: p = \arg\min_{p \in \Delta} \|p - z\|^2 = [z - \tau]_+, \quad
              \tau = \frac{\sum_{j \le k} z_{(j)} - 1}{k}, \;
              k = \max\{k : 1 + k z_{(k)} > \textstyle\sum_{j \le k} z_{(j)}\}

    Example:
        >>> sparsemax(torch.tensor([2.0, 1.0, -1.0]))
        tensor([1., 0., 0.])
        >>> sparsemax(torch.tensor([1.0, 0.5, -1.0]))  # k = 2, tau = (1.5 - 1) / 2
        tensor([0.7500, 0.2500, 0.0000])
    """
    dim = _check_scores(z, dim)
    # torch leaves autograd.Function.apply unannotated; it returns forward's tensor.
    p: torch.Tensor = SparsemaxFunction.apply(z.movedim(dim, -1))  # type: ignore[no-untyped-call]
    return p.movedim(-1, dim)


def entmax15(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""1.5-entmax, exact by sorting (Peters et al., 2019, algorithm 2).

    .. math:: p_i = \left[\tfrac{z_i}{2} - \tau\right]_+^2, \quad \textstyle\sum_i p_i = 1

    Example:
        >>> entmax15(torch.tensor([3.0, 1.0, -5.0]))  # z/2 = 1.5, 0.5: tau = 0.5 exactly
        tensor([1., 0., 0.])
    """
    dim = _check_scores(z, dim)
    # torch leaves autograd.Function.apply unannotated; it returns forward's tensor.
    p: torch.Tensor = Entmax15Function.apply(z.movedim(dim, -1))  # type: ignore[no-untyped-call]
    return p.movedim(-1, dim)


def entmax_bisect(z: torch.Tensor, alpha: Alpha = 1.5, dim: int = -1, n_iter: int = 60,
                  ) -> torch.Tensor:
    r"""alpha-entmax for any :math:`\alpha > 1` by bisection on :math:`\tau`.

    :math:`\sum_i [(\alpha-1) z_i - \tau]_+^{1/(\alpha-1)}` decreases in :math:`\tau`; it is
    :math:`\ge 1` at :math:`\tau = \max_i (\alpha-1) z_i - 1` and :math:`\le 1` at
    :math:`\max_i (\alpha - 1) z_i - n^{1-\alpha}`. ``n_iter`` halvings of that bracket (60 reach
    float64 resolution), then the weights are renormalised to sum to one.

    Args:
        z: scores, any shape.
        alpha: a float, or a tensor broadcastable to ``z`` whose size along ``dim`` is 1 (e.g.
            one learnable alpha per head, ``(H, 1, 1)`` for scores ``(B, H, T_q, T_k)``); every
            alpha must exceed 1.
        dim: the dimension to normalise.
        n_iter: bisection steps.

    Example:
        >>> z = torch.tensor([1.0, 0.4, -1.0], dtype=torch.float64)
        >>> torch.allclose(entmax_bisect(z, 2.0), sparsemax(z))
        True
    """
    dim = _check_scores(z, dim)
    a = torch.as_tensor(alpha, dtype=z.dtype, device=z.device)
    if a.dim() > 0:
        if a.dim() < z.dim():  # leading dimensions of size 1, as broadcasting adds them
            a = a.reshape((1,) * (z.dim() - a.dim()) + tuple(a.shape))
        if a.dim() != z.dim() or a.shape[dim] != 1:
            raise ValueError(f"a tensor alpha must broadcast to the scores with size 1 along "
                             f"dim={dim}; got alpha {tuple(a.shape)} for scores "
                             f"{tuple(z.shape)}")
        try:
            torch.broadcast_shapes(a.shape, z.shape)
        except RuntimeError:
            raise ValueError(f"alpha {tuple(a.shape)} does not broadcast to the scores "
                             f"{tuple(z.shape)}") from None
        a = a.movedim(dim, -1)
    if not bool((a > 1).all()):
        raise ValueError(f"alpha must be greater than 1 (alpha -> 1 is softmax), got {alpha}")
    # torch leaves autograd.Function.apply unannotated; it returns forward's tensor.
    p: torch.Tensor = EntmaxBisectFunction.apply(  # type: ignore[no-untyped-call]
        z.movedim(dim, -1), a, n_iter)
    return p.movedim(-1, dim)


def entmax(z: torch.Tensor, alpha: Alpha = 1.5, dim: int = -1) -> torch.Tensor:
    """alpha-entmax by the best method: sorting for alpha 2 and 1.5 (floats), else bisection.

    Example:
        >>> entmax(torch.tensor([1.0, 0.5, -1.0]), alpha=2.0)
        tensor([0.7500, 0.2500, 0.0000])
    """
    if isinstance(alpha, (int, float)) and alpha == 2:
        return sparsemax(z, dim)
    if isinstance(alpha, (int, float)) and alpha == 1.5:
        return entmax15(z, dim)
    return entmax_bisect(z, alpha, dim)


def entmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alpha: Alpha = 1.5,
                     mask: torch.Tensor | None = None, scale: float | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention with alpha-entmax weights: :math:`O = \alpha\text{-entmax}(s\,Q K^\top)\, V`.

    Masked scores are replaced by ``max - 1/(alpha-1) - 1`` (the row maximum of allowed scores),
    a value that alpha-entmax always maps to exactly 0 since :math:`\tau \ge (\alpha-1)\max - 1`;
    no infinities enter the sort. Rows with no allowed key give zero weights and output.

    Args:
        q: ``(..., T_q, d)``; k: ``(..., T_k, d)``; v: ``(..., T_k, d_v)``.
        alpha: float or tensor (e.g. ``(H, 1, 1)`` per head) as in :func:`entmax_bisect`.
        mask: boolean, broadcastable to ``(..., T_q, T_k)``, ``True`` = may attend.
        scale: multiplies the scores (default ``1 / sqrt(d)``).

    Returns:
        The output ``(..., T_q, d_v)`` and the weights ``(..., T_q, T_k)``.

    Example:
        >>> q = torch.tensor([[[4.0, 0.0]]]); k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
        >>> out, w = entmax_attention(q, k, torch.eye(2)[None], alpha=2.0, scale=1.0)
        >>> w  # score gap 4 > 1: sparsemax puts all the weight on the first key
        tensor([[[1., 0.]]])
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t, min_ndim=2, shape="(..., T, d)")
    check_same_dtype(q=q, k=k, v=v)
    # Before alpha enters the masked scores.
    if not bool((torch.as_tensor(alpha, device=q.device) > 1).all()):
        raise ValueError(f"alpha must be greater than 1 (alpha -> 1 is softmax), got {alpha}")
    if q.shape[-1] != k.shape[-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v) do not fit: "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale                            # (..., T_q, T_k)
    has_key = None
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = may attend), got {mask.dtype}")
        try:
            mask = mask.expand(s.shape)
        except RuntimeError:
            raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to the scores "
                             f"{tuple(s.shape)}") from None
        top = s.detach().masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)
        has_key = torch.isfinite(top)                                # (..., T_q, 1)
        top = torch.where(has_key, top, torch.zeros_like(top))
        a = torch.as_tensor(alpha, dtype=s.dtype, device=s.device).detach()
        s = torch.where(mask, s, top - 1 / (a - 1) - 1)
    w = entmax(s, alpha, dim=-1)
    if has_key is not None:
        w = w * has_key
    return w @ v, w
