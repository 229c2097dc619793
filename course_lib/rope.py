r"""Rotary position embeddings (RoPE), in both pairings of the features.

Taught in chapter 7 (the modern decoder), section 1. Su et al. (2021), "RoFormer: Enhanced
Transformer with Rotary Position Embedding". Chapter 2's sinusoids are *added* to the input;
RoPE instead *rotates* the query and the key of position :math:`m` feature pair by feature pair,
pair :math:`i` by the angle :math:`m\,\omega_i` with :math:`\omega_i = \theta^{-2i/d}`
(:math:`d` the head width, :math:`\theta = 10000` in the paper, 500000 in Llama 3):

.. math:: \begin{pmatrix} q'_{a} \\ q'_{b} \end{pmatrix} =
          \begin{pmatrix} \cos m\omega_i & -\sin m\omega_i \\ \sin m\omega_i & \cos m\omega_i
          \end{pmatrix} \begin{pmatrix} q_{a} \\ q_{b} \end{pmatrix}

Rotations compose, :math:`R_m^\top R_n = R_{n-m}`, so the score :math:`q_m'^\top k_n'` depends on
the offset :math:`n - m` only. The values are never rotated.

Two **pairings** are in use. *Interleaved* (the paper, GPT-NeoX's "gptj" style, CS336): pair
:math:`i` is features :math:`(2i, 2i+1)`. *Half-split* (Llama in Hugging Face, ``rotate_half``):
pair :math:`i` is features :math:`(i, i + d/2)`. They are the same model up to a fixed
permutation of the query and key features (:func:`interleaved_to_half`): a checkpoint trained in
one layout runs in the other once the rows of ``W_q`` and ``W_k`` are permuted.

*Position interpolation* (Chen et al., 2023) runs a model trained on context :math:`T` at
context :math:`sT` by dividing positions by :math:`s` (``scale``), so that every angle stays in the
range seen in training.
"""

from __future__ import annotations

from typing import Literal

import torch

from course_lib.checks import (
    check_float_tensor,
    check_int,
    check_positive,
    check_same_dtype,
    check_tensor,
)

Pairing = Literal["interleaved", "half"]


def _check(head_dim: int, pairing: str) -> None:
    if check_int("head_dim", head_dim, minimum=1) % 2 != 0:
        raise ValueError(f"RoPE rotates pairs of features: head_dim must be even, got {head_dim}")
    if pairing not in ("interleaved", "half"):
        raise ValueError(f"pairing must be 'interleaved' or 'half', got {pairing!r}")


def inv_frequencies(head_dim: int, theta: float = 10000.0, *,
                    device: torch.device | str | None = None) -> torch.Tensor:
    r"""The angular frequencies :math:`\omega_i = \theta^{-2i/d}`, ``(head_dim // 2,)`` float64.

    On ``device`` (the default device when ``None``).

    Example:
        >>> inv_frequencies(4, theta=100.0).tolist()
        [1.0, 0.1]
    """
    _check(head_dim, "half")
    check_positive("theta", theta)
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float = 10000.0,
                scale: float = 1.0) -> torch.Tensor:
    r"""The angles :math:`(m / s)\,\omega_i`: ``positions`` ``(T,)`` -> ``(T, head_dim // 2)``
    float64.

    ``scale`` :math:`s > 1` is position interpolation (positions divided by :math:`s`).

    Example:
        >>> rope_angles(torch.tensor([0, 2]), 4, theta=100.0).tolist()
        [[0.0, 0.0], [2.0, 0.2]]
    """
    check_tensor("positions", positions, ndim=1, shape="(T,)")
    check_positive("scale", scale)
    omega = inv_frequencies(head_dim, theta, device=positions.device)  # (head_dim // 2,)
    return (positions.to(torch.float64) / scale)[:, None] * omega


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x_1, x_2) -> (-x_2, x_1)`` on the two halves of the last axis (Hugging Face's helper).

    Example:
        >>> rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()
        [-3.0, -4.0, 1.0, 2.0]
    """
    _check_even("x", check_tensor("x", x, min_ndim=1, shape="(..., d)"))
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _check_even(name: str, x: torch.Tensor) -> None:
    if x.shape[-1] % 2:
        raise ValueError(f"{name} must have an even last size (RoPE rotates pairs of features), "
                         f"got shape {tuple(x.shape)}")


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0,
               pairing: Pairing = "half", scale: float = 1.0) -> torch.Tensor:
    r"""Rotate every feature pair of ``x`` by its position's angle (apply to q and k, never v).

    Args:
        x: ``(..., T, d)`` queries or keys (``d`` even; e.g. ``(B, h, T, d_head)``).
        positions: ``(T,)`` integer positions of the ``T`` rows (a cache's offset included).
        theta: the base :math:`\theta` of the frequencies.
        pairing: ``"interleaved"`` (pairs ``(2i, 2i+1)``) or ``"half"`` (pairs ``(i, i + d/2)``).
        scale: position interpolation factor :math:`s` (positions divided by it).

    Returns:
        ``x`` rotated, same shape and dtype (angles computed in float64).

    Example:
        >>> x = torch.tensor([[1.0, 0.0, 0.0, 0.0]])  # position 1, feature 0 only
        >>> apply_rope(x, torch.tensor([1]), theta=100.0, pairing="interleaved")
        tensor([[0.5403, 0.8415, 0.0000, 0.0000]])
        >>> apply_rope(x, torch.tensor([1]), theta=100.0, pairing="half")
        tensor([[0.5403, 0.0000, 0.8415, 0.0000]])
    """
    check_float_tensor("x", x, min_ndim=2, shape="(..., T, d)")
    _check_even("x", x)
    check_tensor("positions", positions, shape="(T,)")
    d = x.shape[-1]
    _check(d, pairing)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"positions must be ({x.shape[-2]},), one per row of x; got "
                         f"{tuple(positions.shape)}")
    angles = rope_angles(positions.to(x.device), d, theta, scale)  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if pairing == "half":
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (T, d)
        return x * cos + rotate_half(x) * sin
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d/2): the pairs (2i, 2i+1)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def interleaved_to_half(head_dim: int) -> torch.Tensor:
    """The permutation of features that turns the interleaved layout into the half-split one.

    With ``p = interleaved_to_half(d)`` (features ``0, 2, 4, ...`` first, then ``1, 3, 5, ...``),
    ``apply_rope(x[..., p], pos, pairing="half")`` equals
    ``apply_rope(x, pos, pairing="interleaved")[..., p]``.

    Example:
        >>> interleaved_to_half(6).tolist()
        [0, 2, 4, 1, 3, 5]
        >>> x, pos = torch.randn(5, 6, dtype=torch.float64), torch.arange(5)
        >>> p = interleaved_to_half(6)
        >>> torch.allclose(apply_rope(x[:, p], pos, pairing="half"),
        ...                apply_rope(x, pos, pairing="interleaved")[:, p])
        True
    """
    _check(head_dim, "half")
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


def interleaved_to_half_weight(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The rows of ``W_q`` or ``W_k`` of an interleaved-layout checkpoint, for half-split code.

    ``w`` is ``(..., n_heads * d_head, d_in)`` (``nn.Linear``'s ``(out, in)``, head after head;
    leading axes stack several projections, e.g. one per layer). Within
    each head, output feature ``2i`` moves to ``i`` and ``2i + 1`` to ``i + d_head / 2``
    (:func:`interleaved_to_half`), so that the half-split rotation of the new projections gives
    the scores the interleaved rotation gave the old ones. Values and the output projection are
    not rotated and keep their layout. This is what Hugging Face's conversion of Meta's Llama
    checkpoints does (``permute`` in ``convert_llama_weights_to_hf.py``).

    Example:
        >>> w = torch.arange(8.0)[:, None]  # 2 heads of width 4, one input feature
        >>> interleaved_to_half_weight(w, 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]
    """
    check_float_tensor("w", w, min_ndim=2, shape="(..., n_heads * d_head, d_in)")
    if isinstance(n_heads, bool) or not isinstance(n_heads, int):
        raise TypeError(f"n_heads must be an int, got {type(n_heads).__name__} {n_heads!r}")
    rows = w.shape[-2]
    if n_heads < 1 or rows % n_heads != 0:
        raise ValueError(f"n_heads must be a positive divisor of w's {rows} rows, got {n_heads}")
    d_head = rows // n_heads
    _check(d_head, "half")
    perm = torch.cat((torch.arange(0, d_head, 2, device=w.device),
                      torch.arange(1, d_head, 2, device=w.device)))  # interleaved_to_half(d_head)
    return w.reshape(*w.shape[:-2], n_heads, d_head, w.shape[-1])[..., perm, :].reshape(w.shape)


def rope_scores(q: torch.Tensor, k: torch.Tensor, q_pos: int, k_pos: int,
                theta: float = 10000.0, pairing: Pairing = "half") -> torch.Tensor:
    r"""The score :math:`q'^\top k'` of one query at ``q_pos`` and one key at ``k_pos`` (``(d,)``
    each).

    It depends on ``k_pos - q_pos`` only (section 1's property).

    Example:
        >>> q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
        >>> bool(torch.isclose(rope_scores(q, k, 3, 7), rope_scores(q, k, 103, 107)))
        True
    """
    check_float_tensor("q", q, ndim=1, shape="(d,)")
    check_float_tensor("k", k, ndim=1, shape="(d,)")
    check_same_dtype(q=q, k=k)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have one width (d,), got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    check_int("q_pos", q_pos)
    check_int("k_pos", k_pos)
    qr = apply_rope(q[None], torch.tensor([q_pos], device=q.device), theta, pairing)[0]
    kr = apply_rope(k[None], torch.tensor([k_pos], device=k.device), theta, pairing)[0]
    return qr @ kr
