r"""Positional information: sinusoidal encodings, their relative-position linear map, learned ones.

Taught in chapter 2, section 4. Attention without positions is permutation-equivariant: permute
the input tokens and the outputs are permuted the same way, so "dog bites man" and "man bites dog"
look alike. Adding a position-dependent vector to each token breaks that symmetry.

Vaswani et al. (2017, section 3.5):

.. math:: PE_{t, 2i} = \sin(t\, \omega_i), \quad PE_{t, 2i+1} = \cos(t\, \omega_i), \quad
          \omega_i = 10000^{-2i/d}

Because :math:`\sin(\omega(t+s))` and :math:`\cos(\omega(t+s))` are linear in
:math:`\sin(\omega t)` and :math:`\cos(\omega t)` with coefficients that depend only on ``s``,
there is one matrix :math:`M_s` (block diagonal, 2x2 rotations) with :math:`PE_{t+s} = M_s PE_t`
for every ``t``: :func:`relative_position_map`.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.checks import check_float_tensor


def _check_even(d_model: int) -> None:
    if d_model <= 0 or d_model % 2 != 0:
        raise ValueError(f"sinusoidal encodings pair a sine with a cosine, so d_model must be a "
                         f"positive even number; got d_model={d_model}")


def frequencies(d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64,
                device: torch.device | str | None = None) -> torch.Tensor:
    r"""The angular frequencies :math:`\omega_i = \text{base}^{-2i/d}`, ``i = 0 .. d/2 - 1``.

    Example:
        >>> frequencies(4)
        tensor([1.0000, 0.0100], dtype=torch.float64)
    """
    _check_even(d_model)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    return (base ** (-two_i / d_model)).to(dtype)


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0, *,
                        dtype: torch.dtype = torch.float32,
                        device: torch.device | str | None = None) -> torch.Tensor:
    r"""The sinusoidal positional encodings of Vaswani et al. (2017, section 3.5).

    .. math:: PE_{t, 2i} = \sin\!\left(\frac{t}{\text{base}^{2i/d}}\right), \quad
              PE_{t, 2i+1} = \cos\!\left(\frac{t}{\text{base}^{2i/d}}\right)

    Computed in float64 and cast to ``dtype`` at the end, so float32 tables are accurate to
    rounding even at large ``t``.

    Args:
        n_positions: number of positions ``T`` (``t = 0 .. T-1``).
        d_model: ``d``, even.
        base: 10000 in the paper.
        dtype, device: of the result.

    Returns:
        ``(T, d)``; even columns sines, odd columns cosines.

    Example:
        >>> sinusoidal_encoding(2, 4)
        tensor([[0.0000, 1.0000, 0.0000, 1.0000],
                [0.8415, 0.5403, 0.0100, 0.9999]])
    """
    _check_even(d_model)
    if n_positions < 0:
        raise ValueError(f"n_positions must be >= 0, got {n_positions}")
    t = torch.arange(n_positions, dtype=torch.float64, device=device)
    angles = t[:, None] * frequencies(d_model, base, device=device)[None, :]  # (T, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d/2, 2)
    return pe.reshape(n_positions, d_model).to(dtype)        # (T, d): sin, cos, sin, cos ...


def relative_position_map(shift: int | float, d_model: int, base: float = 10000.0, *,
                          dtype: torch.dtype = torch.float32,
                          device: torch.device | str | None = None) -> torch.Tensor:
    r"""The matrix :math:`M_s` with :math:`PE_{t+s} = M_s\, PE_t` for every position ``t``.

    From :math:`\sin(\omega(t+s)) = \sin(\omega t)\cos(\omega s) + \cos(\omega t)\sin(\omega s)`
    and :math:`\cos(\omega(t+s)) = \cos(\omega t)\cos(\omega s) - \sin(\omega t)\sin(\omega s)`,
    :math:`M_s` is block diagonal with one 2x2 block per frequency:

    .. math:: \begin{pmatrix} \cos \omega_i s & \sin \omega_i s \\ -\sin \omega_i s &
              \cos \omega_i s \end{pmatrix}

    It depends on the offset ``s`` only, never on ``t``: a linear layer can learn to attend "``s``
    positions back" (the argument of Vaswani et al., 2017, section 3.5).

    Args:
        shift: the offset ``s`` (may be negative).
        d_model: ``d``, even.
        base: 10000 in the paper.
        dtype, device: of the result.

    Returns:
        ``(d, d)``, acting on column vectors: ``pe[t + s] == M @ pe[t]`` (for rows: ``pe @ M.T``).

    Example:
        >>> pe = sinusoidal_encoding(10, 8, dtype=torch.float64)
        >>> M = relative_position_map(3, 8, dtype=torch.float64)
        >>> torch.allclose(pe[:-3] @ M.T, pe[3:])
        True
    """
    _check_even(d_model)
    angle = float(shift) * frequencies(d_model, base, device=device)  # (d/2,)
    c, s = angle.cos(), angle.sin()
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    rotation: torch.Tensor = torch.block_diag(*blocks).to(dtype)  # (d, d)
    return rotation


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encodings to a batch of token embeddings.

    The table is a non-persistent buffer, so it moves with ``.to(device)`` and is not saved in
    ``state_dict``; it is cast to the input's dtype.

    Args:
        d_model: ``d``, even.
        max_len: the longest sequence it accepts.
        base: 10000 in the paper.

    Shapes:
        ``(B, T, d)`` to ``(B, T, d)``, ``T <= max_len``.

    Example:
        >>> pos = SinusoidalPositionalEncoding(8, max_len=16)
        >>> pos(torch.zeros(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    pe: torch.Tensor  # (max_len, d) buffer

    def __init__(self, d_model: int, max_len: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len)
        return x + self.pe[: x.shape[1]].to(x.dtype)  # (B, T, d) + (T, d)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT-2) to the token embeddings.

    The alternative Vaswani et al. (2017, table 3, row E) found to work as well; it cannot
    represent positions beyond ``max_len`` and has no built-in relation between offsets.

    Args:
        d_model: ``d``.
        max_len: number of positions with a learned vector.

    Shapes:
        ``(B, T, d)`` to ``(B, T, d)``, ``T <= max_len``.

    Example:
        >>> pos = LearnedPositionalEmbedding(8, max_len=16)
        >>> pos(torch.zeros(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)  # GPT-2's initialisation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len)
        positions = torch.arange(x.shape[1], device=x.device)
        table: torch.Tensor = self.embedding(positions)  # (T, d)
        return x + table.to(x.dtype)  # (B, T, d) + (T, d)


def _check_input(x: torch.Tensor, d_model: int, max_len: int) -> None:
    check_float_tensor("x", x)
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (batch, length, d_model={d_model}), got "
                         f"{tuple(x.shape)}")
    if x.shape[1] > max_len:
        raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={max_len}")
