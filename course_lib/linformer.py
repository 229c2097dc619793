r"""Low-rank attention (Linformer, Wang et al., 2020) and the spectrum of attention matrices.

Taught in chapter 6, section 4. "Linformer: Self-Attention with Linear Complexity" observes that
trained attention matrices :math:`P = \mathrm{softmax}(Q K^\top / \sqrt d)` have most of their
energy in a few singular values, and projects the keys and values *along the sequence* with two
``k x n`` matrices :math:`E, F`:

.. math:: \overline{\mathrm{head}} = \mathrm{softmax}\!\left(\frac{Q (E K)^\top}{\sqrt d}\right)
          (F V), \qquad E K,\; F V \in \mathbb{R}^{k \times d}

so the score matrix is ``n x k``: ``O(n k)`` time and memory for a fixed ``k``. With random
Gaussian :math:`E = F` (entries :math:`\mathcal N(0, 1/k)`, a Johnson-Lindenstrauss projection)
the error shrinks as ``k`` grows but stays large (:func:`approximation_error`); the paper trains
``E`` and ``F`` with the model.

The energy of a matrix is the sum of its squared singular values (its squared Frobenius norm);
:func:`energy_rank` counts how many of the largest hold a given fraction of it, and the best
rank-``r`` approximation (Eckart-Young) leaves exactly the rest (:func:`low_rank_error`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_lib.checks import check_float_tensor, check_int, check_same_dtype
from course_lib.multihead import merge_heads, split_heads


def _check_qkv(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        check_float_tensor(name, t, min_ndim=2, shape="(..., length, features)")
    check_same_dtype(**tensors)


def random_projection(k: int, n: int, *, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> torch.Tensor:
    r"""A ``(k, n)`` Gaussian projection with entries :math:`\mathcal N(0, 1/k)`.

    :math:`\mathbb E\,\|E x\|^2 = \|x\|^2`, so lengths and inner products of the ``d`` columns of
    ``K`` are kept approximately (Johnson-Lindenstrauss).

    Example:
        >>> random_projection(4, 10, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([4, 10])
    """
    if k <= 0 or n <= 0:
        raise ValueError(f"need k > 0 and n > 0, got k={k}, n={n}")
    draw_on = generator.device if generator is not None else None  # a generator's own device
    e = torch.randn(k, n, generator=generator, dtype=dtype, device=draw_on)
    return (e / math.sqrt(k)).to(device)


def linformer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, e: torch.Tensor,
                        f: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    r"""Attention over ``k`` projected keys and values: ``softmax(Q (E K)^T s) (F V)``.

    Args:
        q: ``(..., n_q, d)``; k: ``(..., n, d)``; v: ``(..., n, d_v)``.
        e, f: ``(k_proj, n)``, projecting the keys and values along the sequence.
        scale: multiplies the scores (default ``1 / sqrt(d)``).

    Returns:
        ``(..., n_q, d_v)``. With ``e = f = I_n`` it is exact softmax attention.

    Example:
        >>> q, k, v = torch.randn(3, 1, 6, 4, dtype=torch.float64).unbind(0)
        >>> eye = torch.eye(6, dtype=torch.float64)
        >>> ref = torch.softmax(q @ k.mT / 2, -1) @ v
        >>> torch.allclose(linformer_attention(q, k, v, eye, eye), ref)
        True
    """
    _check_qkv(q=q, k=k, v=v, e=e, f=f)
    n = k.shape[-2]
    if e.dim() != 2 or f.dim() != 2 or e.shape[1] != n or f.shape[1] != n:
        raise ValueError(f"e and f must be (k_proj, n) with n = {n} keys (k {tuple(k.shape)}); "
                         f"got e {tuple(e.shape)} and f {tuple(f.shape)}")
    if e.shape[0] != f.shape[0]:
        raise ValueError(f"e and f must project to the same k_proj; got {tuple(e.shape)} and "
                         f"{tuple(f.shape)}")
    if q.shape[-1] != k.shape[-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q (..., n_q, d), k (..., n, d), v (..., n, d_v) do not fit: "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k_low = e @ k                                                    # (..., k_proj, d)
    v_low = f @ v                                                    # (..., k_proj, d_v)
    w = torch.softmax((q @ k_low.transpose(-2, -1)) * scale, dim=-1)  # (..., n_q, k_proj)
    return w @ v_low                                                 # (..., n_q, d_v)


def approximation_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ks: list[int], *,
                        method: str = "linformer", seed: int = 0) -> list[float]:
    r"""Relative error against exact attention :math:`O = PV` with random ``E = F = R``, per ``k``.

    .. math:: \varepsilon(k) = \frac{\|\bar O_k - O\|_F}{\|O\|_F}, \qquad
              \bar O_k = \begin{cases}
              \mathrm{softmax}(Q (R K)^\top / \sqrt d)\, R V & \text{"linformer"} \\
              P R^\top R V & \text{"jl"} \end{cases}

    ``"jl"`` is Linformer's theorem 1: since :math:`\mathbb E[R^\top R] = I`, :math:`P R^\top R V`
    approximates :math:`PV` with an error falling like :math:`1/\sqrt k` (Johnson-Lindenstrauss);
    it needs :math:`P`, so it is an analysis tool, not a fast method. ``"linformer"`` is the
    ``O(n k)`` mechanism itself: with *random* projections its error falls with ``k`` but stays
    large (the softmax of projected scores is not :math:`P R^\top`); the paper learns ``E, F``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> q, k, v = torch.randn(3, 64, 8, dtype=torch.float64, generator=g).unbind(0)
        >>> err = approximation_error(q, k, v, [4, 256], method="jl")
        >>> err[0] > 2 * err[1]
        True
    """
    if method not in ("linformer", "jl"):
        raise ValueError(f"method must be 'linformer' or 'jl', got {method!r}")
    _check_qkv(q=q, k=k, v=v)
    p = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), dim=-1)
    exact = p @ v                                                    # (..., n_q, d_v)
    g = torch.Generator().manual_seed(seed)
    errors = []
    for k_proj in ks:
        r = random_projection(k_proj, k.shape[-2], generator=g, dtype=q.dtype, device=q.device)
        if method == "jl":
            approx = (p @ r.T) @ (r @ v)
        else:
            approx = linformer_attention(q, k, v, r, r)
        errors.append(float(torch.linalg.norm(approx - exact) / torch.linalg.norm(exact)))
    return errors


def singular_values(weights: torch.Tensor) -> torch.Tensor:
    """Singular values of attention matrices ``(..., n, n)`` -> ``(..., n)``, largest first."""
    if check_float_tensor("weights", weights).dim() < 2:
        raise ValueError(f"weights must be (..., n_q, n_k), got {tuple(weights.shape)}")
    values: torch.Tensor = torch.linalg.svdvals(weights)
    return values


def cumulative_energy(weights: torch.Tensor) -> torch.Tensor:
    r"""Fraction of the energy held by the ``r`` largest singular values, ``r = 1..n``.

    .. math:: c_r = \frac{\sum_{i \le r} \sigma_i^2}{\sum_i \sigma_i^2}

    Example:
        >>> cumulative_energy(torch.diag(torch.tensor([3.0, 1.0])))
        tensor([0.9000, 1.0000])
    """
    s2 = singular_values(weights) ** 2
    return torch.cumsum(s2, dim=-1) / s2.sum(dim=-1, keepdim=True)


def energy_rank(weights: torch.Tensor, fraction: float = 0.9) -> torch.Tensor:
    """How many of the largest singular values hold ``fraction`` of the energy, per matrix.

    Args:
        weights: ``(..., n_q, n_k)`` (e.g. the attention weights of every head).
        fraction: in ``(0, 1]``.

    Returns:
        Integer tensor ``(...)``, the smallest ``r`` with ``cumulative_energy[r - 1] >= fraction``.

    Example:
        >>> energy_rank(torch.diag(torch.tensor([3.0, 1.0])), 0.9).item()
        1
        >>> energy_rank(torch.eye(5) / 5, 0.9).item()  # flat spectrum: 5 * 0.9 -> 5
        5
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    c = cumulative_energy(weights)
    # Tolerance: a spectrum that reaches the fraction exactly must not need one more value.
    tol = 64 * torch.finfo(c.dtype).eps
    return (c < fraction - tol).sum(dim=-1) + 1


def low_rank_error(weights: torch.Tensor, rank: int) -> torch.Tensor:
    r"""Relative Frobenius error of the best rank-``r`` approximation (Eckart-Young).

    .. math:: \frac{\|P - P_r\|_F}{\|P\|_F} = \sqrt{1 - c_r}

    Example:
        >>> low_rank_error(torch.diag(torch.tensor([3.0, 1.0])), 1)
        tensor(0.3162)
    """
    if check_int("rank", rank) < 0:
        raise ValueError(f"rank must be non-negative, got {rank}")
    s2 = singular_values(weights) ** 2
    rest = s2[..., rank:].sum(dim=-1)
    return torch.sqrt(rest / s2.sum(dim=-1))


class LinformerSelfAttention(nn.Module):
    r"""Multi-head self-attention with learned ``E, F`` (shared by the heads, as the paper's
    "headwise sharing") projecting ``seq_len`` keys and values to ``k``.

    Args:
        d_model: width ``d``.
        n_heads: heads ``h`` (dividing ``d``).
        seq_len: ``n``, the fixed input length the projections are built for.
        k: projected length.
        bias: biases of the four ``nn.Linear`` projections.

    Shapes: ``(B, n, d) -> (B, n, d)``; the scores are ``(B, h, n, k)``.

    Example:
        >>> attn = LinformerSelfAttention(d_model=8, n_heads=2, seq_len=16, k=4)
        >>> attn(torch.randn(3, 16, 8)).shape
        torch.Size([3, 16, 8])
    """

    def __init__(self, d_model: int, n_heads: int, seq_len: int, k: int, bias: bool = True,
                 ) -> None:
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if not 0 < k:
            raise ValueError(f"k must be positive, got {k}")
        self.n_heads, self.seq_len = n_heads, seq_len
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.e = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))  # (k, n)
        self.f = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))  # (k, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if check_float_tensor("x", x).dim() != 3 or x.shape[1] != self.seq_len:
            raise ValueError(f"x must be (batch, seq_len={self.seq_len}, d_model), got "
                             f"{tuple(x.shape)}")
        q = split_heads(self.q_proj(x), self.n_heads)                # (B, h, n, d_head)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        out = linformer_attention(q, k, v, self.e, self.f)           # (B, h, n, d_head)
        y: torch.Tensor = self.out_proj(merge_heads(out))            # (B, n, d)
        return y
