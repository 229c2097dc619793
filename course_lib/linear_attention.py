r"""Linear attention: attention as a kernel, computed in O(n) (Katharopoulos et al., 2020).

Taught in chapter 6, section 3. "Transformers are RNNs: Fast Autoregressive Transformers with
Linear Attention" replaces the softmax similarity :math:`\exp(q^\top k / \sqrt d)` by an inner
product of feature maps, :math:`\mathrm{sim}(q, k) = \phi(q)^\top \phi(k)`, so that

.. math:: O_i = \frac{\sum_j \phi(q_i)^\top \phi(k_j)\, v_j}{\sum_j \phi(q_i)^\top \phi(k_j)}
              = \frac{\phi(q_i)^\top \left(\sum_j \phi(k_j) v_j^\top\right)}
                     {\phi(q_i)^\top \sum_j \phi(k_j)}

and the two sums over keys are computed once: ``O(n d d_v)`` time instead of ``O(n^2 d)``. Their
feature map is :math:`\phi(x) = \mathrm{elu}(x) + 1` (positive, so the denominator is too).

Causal attention sums over :math:`j \le i` only: the sums become prefix sums
:math:`S_i = \sum_{j \le i} \phi(k_j) v_j^\top`, :math:`z_i = \sum_{j \le i} \phi(k_j)`, which is
an RNN whose state :math:`(S, z)` has a constant size ``d_phi x (d_v + 1)`` whatever the length:
:func:`linear_attention_step`. :func:`kernel_attention` is the quadratic form with the same kernel,
the peer of every fast form here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from course_lib.checks import check_float_tensor, check_same_dtype

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    r"""Katharopoulos et al.'s feature map :math:`\phi(x) = \mathrm{elu}(x) + 1 > 0`.

    .. math:: \mathrm{elu}(x) + 1 = \begin{cases} x + 1 & x > 0 \\ e^{x} & x \le 0 \end{cases}

    Computed in the second form: ``F.elu(x) + 1`` rounds ``(e^x - 1) + 1`` to exactly 0 in
    float32 from ``x < -17`` on, which would make rows of similarities vanish.

    Example:
        >>> elu_feature_map(torch.tensor([-20.0, 0.0, 2.0]))
        tensor([2.0612e-09, 1.0000e+00, 3.0000e+00])
    """
    check_float_tensor("x", x)
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))  # clamp: no inf in backward


def relu_feature_map(x: torch.Tensor) -> torch.Tensor:
    r""":math:`\phi(x) = \max(x, 0)`: non-negative but may be all zero (then the row output is 0).

    Example:
        >>> relu_feature_map(torch.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """
    check_float_tensor("x", x)
    return F.relu(x)


def exp_feature_map(x: torch.Tensor) -> torch.Tensor:
    r""":math:`\phi(x) = e^{x}` elementwise (positive; a crude stand-in for the softmax kernel).

    Example:
        >>> exp_feature_map(torch.zeros(2))
        tensor([1., 1.])
    """
    check_float_tensor("x", x)
    return torch.exp(x)


def _check_features(x: torch.Tensor, w: torch.Tensor) -> None:
    check_float_tensor("x", x, min_ndim=1, shape="(..., d)")
    check_float_tensor("w", w, ndim=2, shape="(m, d)")
    check_same_dtype(x=x, w=w)


def positive_random_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    r"""Performer's positive random features of the softmax kernel (Choromanski et al., 2021).

    .. math:: \phi(x) = \frac{1}{\sqrt m} \exp\!\left(W x - \tfrac{\lVert x \rVert^2}{2}\right),
              \qquad \mathbb{E}_{w_i \sim \mathcal N(0, I)}\left[\phi(x)^\top \phi(y)\right]
              = e^{x^\top y}

    since :math:`\mathbb E[e^{w^\top u}] = e^{\lVert u \rVert^2 / 2}` with :math:`u = x + y`
    (the paper's lemma 1, section 2.3). Every feature is positive, so the estimated normaliser
    :math:`\phi(q)^\top \sum_j \phi(k_j)` is too.

    Args:
        x: ``(..., d)``.
        w: ``(m, d)``, the random directions as rows, applied as ``x @ w.T`` (``nn.Linear``'s
            convention); each row drawn from :math:`\mathcal N(0, I_d)`.

    Returns:
        ``(..., m)``, positive.

    Example:
        >>> positive_random_features(torch.tensor([[3.0, 4.0]]), torch.zeros(4, 2))  # e^{-12.5} / 2
        tensor([[1.8633e-06, 1.8633e-06, 1.8633e-06, 1.8633e-06]])
    """
    _check_features(x, w)
    if x.shape[-1] != w.shape[-1] or w.dim() != 2:
        raise ValueError(f"w must be (m, d) with d the last size of x; got x {tuple(x.shape)} "
                         f"and w {tuple(w.shape)}")
    half_norm = 0.5 * (x * x).sum(dim=-1, keepdim=True)              # (..., 1)
    features: torch.Tensor = torch.exp(x @ w.transpose(0, 1) - half_norm) / w.shape[0] ** 0.5
    return features


def trigonometric_random_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    r"""Random Fourier features of the softmax kernel: unbiased too, but of either sign.

    .. math:: \phi(x) = \frac{e^{\lVert x \rVert^2 / 2}}{\sqrt m}
              \left[\sin(W x), \cos(W x)\right], \qquad
              \mathbb E\left[\phi(x)^\top \phi(y)\right] = e^{\lVert x \rVert^2 / 2 +
              \lVert y \rVert^2 / 2}\, e^{-\lVert x - y \rVert^2 / 2} = e^{x^\top y}

    (Rahimi and Recht's features of the Gaussian kernel, rescaled; Choromanski et al., 2021,
    section 2.2). Products of features can be negative, so an estimated normaliser can come out
    near zero or negative where the true one is small: the reason Performer uses
    :func:`positive_random_features`.

    Args:
        x: ``(..., d)``; w: ``(m, d)`` as in :func:`positive_random_features`.

    Returns:
        ``(..., 2 m)``.

    Example:
        >>> trigonometric_random_features(torch.zeros(1, 2), torch.ones(3, 2))  # sin 0, cos 0
        tensor([[0.0000, 0.0000, 0.0000, 0.5774, 0.5774, 0.5774]])
    """
    _check_features(x, w)
    if x.shape[-1] != w.shape[-1] or w.dim() != 2:
        raise ValueError(f"w must be (m, d) with d the last size of x; got x {tuple(x.shape)} "
                         f"and w {tuple(w.shape)}")
    proj = x @ w.transpose(0, 1)                                     # (..., m)
    scale = torch.exp(0.5 * (x * x).sum(dim=-1, keepdim=True)) / w.shape[0] ** 0.5
    features: torch.Tensor = scale * torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1)
    return features


FEATURE_MAPS: dict[str, FeatureMap] = {
    "elu+1": elu_feature_map,
    "relu": relu_feature_map,
    "exp": exp_feature_map,
}


def _feature_map(feature_map: str | FeatureMap) -> FeatureMap:
    if callable(feature_map):
        return feature_map
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map {feature_map!r}; choose one of "
                         f"{sorted(FEATURE_MAPS)} or pass a callable")
    return FEATURE_MAPS[feature_map]


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t)
    check_same_dtype(q=q, k=k, v=v)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k, v need (..., length, features); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same feature size; got q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k and v must have the same batch dimensions and length; got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must have the same batch dimensions; got q {tuple(q.shape)} "
                         f"and k {tuple(k.shape)}")
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs as many queries as keys; got "
                         f"{q.shape[-2]} and {k.shape[-2]}")


def _divide(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den[..., None]`` with rows of zero similarity mass giving zeros, not NaN."""
    ok = den > 0
    return num / torch.where(ok, den, torch.ones_like(den))[..., None] * ok[..., None]


def kernel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     feature_map: str | FeatureMap = "elu+1", causal: bool = False,
                     ) -> torch.Tensor:
    r"""The quadratic form of kernel attention: build the ``(T_q, T_k)`` similarities, normalise.

    .. math:: A_{ij} = \phi(q_i)^\top \phi(k_j) \;[j \le i \text{ if causal}], \qquad
              O_i = \frac{\sum_j A_{ij} v_j}{\sum_j A_{ij}}

    Args:
        q: ``(..., T_q, d)``; k: ``(..., T_k, d)``; v: ``(..., T_k, d_v)``.
        feature_map: ``"elu+1"``, ``"relu"``, ``"exp"`` or a callable applied to the last axis.
        causal: keep only ``j <= i`` (needs ``T_q == T_k``).

    Returns:
        ``(..., T_q, d_v)``; a row whose similarities are all zero gives zeros.

    Example:
        >>> q = k = torch.zeros(1, 3, 2)  # phi = 1 everywhere: uniform weights
        >>> v = torch.tensor([[[0.0], [3.0], [6.0]]])
        >>> kernel_attention(q, k, v, causal=True).flatten()
        tensor([0.0000, 1.5000, 3.0000])
    """
    _check(q, k, v, causal)
    phi = _feature_map(feature_map)
    a = phi(q) @ phi(k).transpose(-2, -1)                            # (..., T_q, T_k)
    if causal:
        a = a.tril()
    return _divide(a @ v, a.sum(dim=-1))                             # (..., T_q, d_v)


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     feature_map: str | FeatureMap = "elu+1") -> torch.Tensor:
    r"""Non-causal linear attention in ``O(n)``: sum the keys once, then read with each query.

    .. math:: S = \sum_j \phi(k_j) v_j^\top, \quad z = \sum_j \phi(k_j), \qquad
              O_i = \frac{\phi(q_i)^\top S}{\phi(q_i)^\top z}

    Args:
        q: ``(..., T_q, d)``; k: ``(..., T_k, d)``; v: ``(..., T_k, d_v)``.
        feature_map: see :func:`kernel_attention`.

    Returns:
        ``(..., T_q, d_v)``, equal to ``kernel_attention(q, k, v, feature_map)``.

    Example:
        >>> q, k, v = torch.randn(3, 2, 7, 4, dtype=torch.float64).unbind(0)
        >>> torch.allclose(linear_attention(q, k, v), kernel_attention(q, k, v))
        True
    """
    _check(q, k, v, causal=False)
    phi = _feature_map(feature_map)
    fq, fk = phi(q), phi(k)                                          # (..., T, d_phi)
    s = fk.transpose(-2, -1) @ v                                     # (..., d_phi, d_v)
    z = fk.sum(dim=-2)                                               # (..., d_phi)
    return _divide(fq @ s, (fq * z[..., None, :]).sum(dim=-1))       # (..., T_q, d_v)


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            feature_map: str | FeatureMap = "elu+1") -> torch.Tensor:
    r"""Causal linear attention as prefix sums over positions.

    .. math:: S_i = \sum_{j \le i} \phi(k_j) v_j^\top, \quad z_i = \sum_{j \le i} \phi(k_j),
              \qquad O_i = \frac{\phi(q_i)^\top S_i}{\phi(q_i)^\top z_i}

    The ``cumsum`` holds every :math:`S_i` at once (``T x d_phi x d_v`` numbers: linear in ``T``,
    fast in parallel); :func:`recurrent_linear_attention` keeps only the last one.

    Args:
        q, k: ``(..., T, d)``; v: ``(..., T, d_v)``.
        feature_map: see :func:`kernel_attention`.

    Returns:
        ``(..., T, d_v)``, equal to ``kernel_attention(q, k, v, feature_map, causal=True)``.

    Example:
        >>> q, k, v = torch.randn(3, 2, 7, 4, dtype=torch.float64).unbind(0)
        >>> torch.allclose(causal_linear_attention(q, k, v), kernel_attention(q, k, v, causal=True))
        True
    """
    _check(q, k, v, causal=True)
    phi = _feature_map(feature_map)
    fq, fk = phi(q), phi(k)                                          # (..., T, d_phi)
    s = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)     # (..., T, d_phi, d_v)
    z = torch.cumsum(fk, dim=-2)                                     # (..., T, d_phi)
    num = (fq[..., None, :] @ s).squeeze(-2)                         # (..., T, d_v)
    return _divide(num, (fq * z).sum(dim=-1))


def init_state(k: torch.Tensor, v: torch.Tensor, feature_map: str | FeatureMap = "elu+1",
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty RNN state ``(S, z)``: zeros ``(..., d_phi, d_v)`` and ``(..., d_phi)``.

    ``k`` ``(..., d)`` and ``v`` ``(..., d_v)`` are one position's key and value; they fix the
    shapes, dtype and device (``d_phi`` is the size of ``phi(k)``).

    Example:
        >>> S, z = init_state(torch.zeros(2, 4), torch.zeros(2, 3))
        >>> S.shape, z.shape
        (torch.Size([2, 4, 3]), torch.Size([2, 4]))
    """
    check_float_tensor("k", k, min_ndim=1, shape="(..., d)")
    check_float_tensor("v", v, min_ndim=1, shape="(..., d_v)")
    d_phi = _feature_map(feature_map)(k).shape[-1]
    S = k.new_zeros(*k.shape[:-1], d_phi, v.shape[-1])
    return S, k.new_zeros(*k.shape[:-1], d_phi)


def linear_attention_step(state: tuple[torch.Tensor, torch.Tensor], q: torch.Tensor,
                          k: torch.Tensor, v: torch.Tensor,
                          feature_map: str | FeatureMap = "elu+1",
                          ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    r"""One step of causal linear attention as an RNN: update the state, then read it.

    .. math:: S_t = S_{t-1} + \phi(k_t) v_t^\top, \quad z_t = z_{t-1} + \phi(k_t), \qquad
              o_t = \frac{\phi(q_t)^\top S_t}{\phi(q_t)^\top z_t}

    The cost of a step does not depend on ``t``: generation with linear attention takes the same
    time per token however long the prefix (a softmax key-value cache grows with it).

    Args:
        state: ``(S, z)``, ``(..., d_phi, d_v)`` and ``(..., d_phi)`` (see :func:`init_state`).
        q, k: ``(..., d)`` for the new position; v: ``(..., d_v)``.
        feature_map: see :func:`kernel_attention`.

    Returns:
        ``o_t`` ``(..., d_v)`` and the new state.

    Example:
        >>> q = k = torch.zeros(1, 2); state = init_state(k, torch.zeros(1, 1))
        >>> for value in (2.0, 4.0):
        ...     o, state = linear_attention_step(state, q, k, torch.tensor([[value]]))
        >>> o  # uniform weights over the two values
        tensor([[3.]])
    """
    if not isinstance(state, tuple) or len(state) != 2:
        raise TypeError(f"state must be a pair (S, z) of tensors (see init_state), got "
                        f"{type(state).__name__}")
    S, z = state
    check_float_tensor("state S", S)
    check_float_tensor("state z", z)
    check_float_tensor("q", q, min_ndim=1, shape="(..., d)")
    check_float_tensor("k", k, min_ndim=1, shape="(..., d)")
    check_float_tensor("v", v, min_ndim=1, shape="(..., d_v)")
    check_same_dtype(q=q, k=k, v=v)
    phi = _feature_map(feature_map)
    fq, fk = phi(q), phi(k)                                          # (..., d_phi)
    if S.shape != (*fk.shape, v.shape[-1]) or z.shape != fk.shape:
        raise ValueError(f"state S {tuple(S.shape)}, z {tuple(z.shape)} does not fit phi(k) "
                         f"{tuple(fk.shape)} and v {tuple(v.shape)}; expected S (..., d_phi, d_v) "
                         "and z (..., d_phi)")
    S = S + fk[..., :, None] * v[..., None, :]                       # (..., d_phi, d_v)
    z = z + fk
    num = (fq[..., None, :] @ S).squeeze(-2)                         # (..., d_v)
    return _divide(num, (fq * z).sum(dim=-1)), (S, z)


def recurrent_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               feature_map: str | FeatureMap = "elu+1") -> torch.Tensor:
    """Causal linear attention run position by position with :func:`linear_attention_step`.

    Holds one ``(S, z)`` state at a time, ``O(d_phi d_v)`` memory for any length.

    Example:
        >>> q, k, v = torch.randn(3, 2, 7, 4, dtype=torch.float64).unbind(0)
        >>> torch.allclose(recurrent_linear_attention(q, k, v), causal_linear_attention(q, k, v))
        True
    """
    _check(q, k, v, causal=True)
    if q.shape[-2] == 0:
        raise ValueError(f"recurrent_linear_attention needs at least one position, got q "
                         f"{tuple(q.shape)}")
    state = init_state(k[..., 0, :], v[..., 0, :], feature_map)
    outs = []
    for t in range(q.shape[-2]):
        o, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :],
                                         feature_map)
        outs.append(o)
    return torch.stack(outs, dim=-2)                                 # (..., T, d_v)
