r"""Scaling laws: the published ones as functions, and the fits that find them in a sweep.

Taught in chapter 5 (scaling laws), sections 5 (fits), 6 (extrapolation) and 7 (the published laws).

**Kaplan et al. (2020)** fit the test loss of GPT-style models on WebText2 (nats per BPE token)
as power laws in the non-embedding parameters :math:`N`, the training tokens :math:`D` and the
compute :math:`C_{\min}` in PF-days (:func:`kaplan_loss_n`, :func:`kaplan_loss_d`,
:func:`kaplan_loss_c`, :func:`kaplan_loss_nd`):

.. math:: L(N) = (N_c / N)^{\alpha_N}, \quad L(D) = (D_c / D)^{\alpha_D}, \quad
          L(N, D) = \Big[(N_c/N)^{\alpha_N/\alpha_D} + D_c/D\Big]^{\alpha_D},

and found the compute-optimal model to grow as :math:`N_{opt} \propto C^{0.73}`, the data as
:math:`C^{0.27}`.

**Hoffmann et al. (2022)** ("Chinchilla") fit, on MassiveText,

.. math:: L(N, D) = E + \frac{A}{N^\alpha} + \frac{B}{D^\beta}

(:func:`chinchilla_loss`; their approach 3: :data:`CHINCHILLA`), with its minimum under
:math:`C = 6ND` (:func:`compute_optimal`), and found
:math:`N_{opt} \propto C^a` with :math:`a \approx 0.5` with all three of their approaches.
Besiroglu et al. (2024) refitted approach 3 on data reconstructed from the paper's figure and
found the published parameters neither fit that data well nor agree with the paper's other
approaches.

**Fits** (used on ``course_lib/data/scaling_sweep.csv.gz``): :func:`fit_power_law` (least squares
in log-log), :func:`bootstrap_power_law` (its confidence interval), :func:`fit_chinchilla`
(approach 3: a Huber loss on the log loss, L-BFGS from a grid of starts) and
:func:`isoflop_minimum` (approach 2: a parabola in :math:`\log N` per compute budget).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from course_lib.checks import (
    check_finite,
    check_finite_tensor,
    check_float_tensor,
    check_ids,
    check_positive,
    check_positive_tensor,
    check_tensor,
)

ArrayLike = Sequence[float] | np.ndarray | torch.Tensor

# --------------------------------------------------------------------------------------------
# The published laws
# --------------------------------------------------------------------------------------------

#: Kaplan et al. (2020), section 1.2 and Table 5: exponents and scales of L(N), L(D), L(C_min).
KAPLAN_ALPHA_N, KAPLAN_N_C = 0.076, 8.8e13  # N_c in non-embedding parameters
KAPLAN_ALPHA_D, KAPLAN_D_C = 0.095, 5.4e13  # D_c in tokens
KAPLAN_ALPHA_C, KAPLAN_C_C = 0.050, 3.1e8  # C_c in PF-days
#: Kaplan et al.'s compute-optimal exponents: N_opt ~ C^0.73, D_opt ~ C^0.27.
KAPLAN_N_EXPONENT, KAPLAN_D_EXPONENT = 0.73, 0.27


def _as_tensor(value: ArrayLike) -> torch.Tensor:
    """A tensor stays where it is (``torch.as_tensor`` would move it to the default device)."""
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def _positive(name: str, value: ArrayLike | float) -> np.ndarray:
    v = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value,
                   dtype=np.float64)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"{name} must be finite and positive, got {value!r}")
    return v


def kaplan_loss_n(n_params: float) -> float:
    r"""Kaplan et al.'s :math:`L(N) = (N_c/N)^{\alpha_N}`: a model trained to convergence.

    Example:
        >>> round(kaplan_loss_n(1.5e9), 2)  # about GPT-2 XL's non-embedding size
        2.3
    """
    return float((KAPLAN_N_C / _positive("n_params", n_params)) ** KAPLAN_ALPHA_N)


def kaplan_loss_d(n_tokens: float) -> float:
    r"""Kaplan et al.'s :math:`L(D) = (D_c/D)^{\alpha_D}`: a large model stopped early.

    Example:
        >>> round(kaplan_loss_d(3e11), 2)
        1.64
    """
    return float((KAPLAN_D_C / _positive("n_tokens", n_tokens)) ** KAPLAN_ALPHA_D)


def kaplan_loss_nd(n_params: float, n_tokens: float) -> float:
    r"""Kaplan et al.'s :math:`L(N, D) = [(N_c/N)^{\alpha_N/\alpha_D} + D_c/D]^{\alpha_D}`.

    Example:
        >>> kaplan_loss_nd(1e9, 1e30) - kaplan_loss_n(1e9) < 1e-9  # infinite data: L(N)
        True
    """
    n, d = _positive("n_params", n_params), _positive("n_tokens", n_tokens)
    return float(((KAPLAN_N_C / n) ** (KAPLAN_ALPHA_N / KAPLAN_ALPHA_D)
                  + KAPLAN_D_C / d) ** KAPLAN_ALPHA_D)


def kaplan_loss_c(pf_days: float) -> float:
    r"""Kaplan et al.'s :math:`L(C_{\min}) = (C_c / C_{\min})^{\alpha_C}`, compute in PF-days.

    Example:
        >>> round(kaplan_loss_c(3.64e3), 2)  # GPT-3's training compute
        1.76
    """
    return float((KAPLAN_C_C / _positive("pf_days", pf_days)) ** KAPLAN_ALPHA_C)


@dataclass(frozen=True)
class ChinchillaFit:
    """The five parameters of :math:`L(N, D) = E + A/N^\\alpha + B/D^\\beta` (nats per token)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def loss(self, n_params: ArrayLike | float, n_tokens: ArrayLike | float) -> np.ndarray:
        """The law at ``(N, D)`` (broadcast)."""
        n, d = _positive("n_params", n_params), _positive("n_tokens", n_tokens)
        return self.E + self.A / n**self.alpha + self.B / d**self.beta

    def compute_optimal(self, flops: float) -> tuple[float, float]:
        """:func:`compute_optimal` with these parameters."""
        return compute_optimal(flops, self.E, self.A, self.B, self.alpha, self.beta)


#: Hoffmann et al. (2022), section 3.3 (approach 3), fitted on MassiveText.
CHINCHILLA = ChinchillaFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
#: The compute-optimal exponents a (N_opt ~ C^a) and b (D_opt ~ C^b) of Hoffmann et al.'s three
#: approaches (their Table 2).
CHINCHILLA_EXPONENTS: dict[str, tuple[float, float]] = {
    "approach 1": (0.50, 0.50), "approach 2": (0.49, 0.51), "approach 3": (0.46, 0.54)}
#: Chinchilla and Gopher: (parameters, training tokens) (Hoffmann et al., 2022, Table 1).
CHINCHILLA_MODEL, GOPHER_MODEL = (70e9, 1.4e12), (280e9, 300e9)
#: Gopher's training compute as Hoffmann et al. count it (their Table 3 and Figure 1), FLOPs.
GOPHER_FLOPS = 5.76e23
#: Hoffmann et al.'s Table 3 (approach 1's projections): (parameters, FLOPs, tokens) per row.
CHINCHILLA_TABLE3: tuple[tuple[float, float, float], ...] = (
    (400e6, 1.92e19, 8.0e9), (1e9, 1.21e20, 20.2e9), (10e9, 1.23e22, 205.1e9),
    (67e9, 5.76e23, 1.5e12), (175e9, 3.85e24, 3.7e12), (280e9, 9.90e24, 5.9e12),
    (520e9, 3.43e25, 11.0e12), (1e12, 1.27e26, 21.2e12), (10e12, 1.30e28, 216.2e12))
#: Kaplan et al.'s compute-efficient model size (their Figure 14, left):
#: N_opt = 1.3e9 C_min^0.73, N non-embedding, C_min in PF-days.
KAPLAN_N_OPT_COEFFICIENT = 1.3e9
#: Published training runs: name -> (parameters, training tokens, training FLOPs as published or
#: 6ND). GPT-3: Brown et al. (2020), Table D.1 (3,640 PF-days); Gopher and Chinchilla: Hoffmann
#: et al. (2022), Table 1 and their count of Gopher's budget; Llama 3 8B: Dubey et al. (2024),
#: about 15 trillion tokens, its FLOPs 6ND.
PUBLISHED_RUNS: dict[str, tuple[float, float, float]] = {
    "GPT-3 175B": (175e9, 300e9, 3.64e3 * 1e15 * 86400),
    "Gopher 280B": (280e9, 300e9, GOPHER_FLOPS),
    "Chinchilla 70B": (70e9, 1.4e12, 6 * 70e9 * 1.4e12),
    "Llama 3 8B": (8e9, 15e12, 6 * 8e9 * 15e12)}


def kaplan_optimal_n(flops: float) -> float:
    r"""Kaplan et al.'s compute-efficient non-embedding size, :math:`1.3 \times 10^9\,
    C_{\min}^{0.73}` with :math:`C_{\min}` in PF-days (their Figure 14); ``flops`` in FLOPs.

    Example:
        >>> f"{kaplan_optimal_n(3.64e3 * 8.64e19):.2g}"  # at GPT-3's compute
        '5.2e+11'
    """
    if flops <= 0:
        raise ValueError(f"flops must be positive, got {flops}")
    n_opt: float = KAPLAN_N_OPT_COEFFICIENT * (flops / 8.64e19) ** KAPLAN_N_EXPONENT
    return n_opt


def chinchilla_loss(n_params: torch.Tensor, n_tokens: torch.Tensor, E: float = CHINCHILLA.E,
                    A: float = CHINCHILLA.A, B: float = CHINCHILLA.B,
                    alpha: float = CHINCHILLA.alpha, beta: float = CHINCHILLA.beta,
                    ) -> torch.Tensor:
    r"""Hoffmann et al.'s parametric loss :math:`E + A/N^\alpha + B/D^\beta`, elementwise.

    Args:
        n_params, n_tokens: tensors of the same shape (or broadcastable), any float dtype.
        E, A, B, alpha, beta: the law's parameters (default: the paper's approach 3).

    Returns:
        A tensor of the broadcast shape and the inputs' dtype.

    Example:
        >>> round(chinchilla_loss(torch.tensor(70e9), torch.tensor(1.4e12)).item(), 3)
        1.937
    """
    for name, t in (("n_params", n_params), ("n_tokens", n_tokens)):
        check_positive_tensor(name, check_float_tensor(name, t))  # N <= 0 gives inf or NaN
    for name, value in (("E", E), ("A", A), ("B", B), ("alpha", alpha), ("beta", beta)):
        check_finite(name, value)
    return E + A / n_params**alpha + B / n_tokens**beta


def compute_optimal(flops: float, E: float = CHINCHILLA.E, A: float = CHINCHILLA.A,
                    B: float = CHINCHILLA.B, alpha: float = CHINCHILLA.alpha,
                    beta: float = CHINCHILLA.beta) -> tuple[float, float]:
    r"""The ``(N, D)`` that minimise :math:`E + A/N^\alpha + B/D^\beta` under :math:`6ND = C`.

    ``E`` does not move the optimum (it is accepted for a uniform signature).

    Example:
        >>> n, d = compute_optimal(5.76e23)  # Gopher's budget, with the approach-3 parameters
        >>> f"{n:.3g} params, {d:.3g} tokens"
        '3.22e+10 params, 2.98e+12 tokens'
    """
    for name, value in (("flops", flops), ("A", A), ("B", B), ("alpha", alpha), ("beta", beta)):
        check_positive(name, value)  # NaN and inf too: they would come back as NaN
    check_finite("E", E)
    g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    n = g * (flops / 6) ** (beta / (alpha + beta))
    d = (flops / 6) ** (alpha / (alpha + beta)) / g
    return float(n), float(d)


# --------------------------------------------------------------------------------------------
# Fits
# --------------------------------------------------------------------------------------------


def fit_power_law(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    r"""Least squares in log-log: :math:`\log y = \log c + k \log x`; returns ``(k, c)``.

    Natural logarithms throughout (any base gives the same :math:`k`; :math:`c` needs the
    matching exponential). Computed in float64 whatever the inputs' dtype.

    Args:
        x, y: 1-D tensors of the same length (at least 2), positive.

    Returns:
        ``(exponent, coefficient)`` as Python floats: :math:`y \approx c\, x^k`.

    Example:
        >>> k, c = fit_power_law(torch.tensor([1.0, 10.0, 100.0]), torch.tensor([3.0, 0.3, 0.03]))
        >>> round(k, 6), round(c, 6)
        (-1.0, 3.0)
    """
    x64 = _as_tensor(x).double().flatten()
    y64 = _as_tensor(y).double().flatten()
    if x64.numel() != y64.numel() or x64.numel() < 2:
        raise ValueError(f"x and y need the same length >= 2, got {x64.numel()} and "
                         f"{y64.numel()}")
    check_finite_tensor("x", x64)
    check_finite_tensor("y", y64)
    if (x64 <= 0).any() or (y64 <= 0).any():
        raise ValueError("a power law is fitted in log-log: x and y must be positive")
    lx, ly = x64.log(), y64.log()
    lx_c = lx - lx.mean()
    if not bool((lx_c != 0).any()):
        raise ValueError(f"x must hold at least two different values: the exponent is a slope in "
                         f"log x, and all {x64.numel()} points sit at x = {x64[0].item():g}")
    slope = (lx_c * (ly - ly.mean())).sum() / (lx_c * lx_c).sum()
    intercept = ly.mean() - slope * lx.mean()
    return float(slope), float(intercept.exp())


@dataclass(frozen=True)
class PowerLawFit:
    """A power law :math:`y = c\\,x^k` with a bootstrap interval on the exponent."""

    exponent: float
    coefficient: float
    exponent_ci: tuple[float, float]  # the central ``level`` interval of the bootstrap exponents
    level: float


def bootstrap_interval(x: torch.Tensor, y: torch.Tensor, indices: torch.Tensor,
                       level: float = 0.9) -> tuple[float, float]:
    r"""A percentile bootstrap interval of a power law's exponent, from given resamples.

    Taught in chapter 5, section 6. Row ``b`` of ``indices`` is one resample of the points (drawn
    with replacement); its exponent is the least-squares slope of :math:`\log y` on
    :math:`\log x` over those points (:func:`fit_power_law`). A resample whose ``x`` are all
    equal has no slope and is skipped. The interval is the central ``level`` of the slopes:
    their :math:`(1 - \text{level})/2` and :math:`(1 + \text{level})/2` quantiles, linearly
    interpolated (``torch.quantile``'s default, as ``numpy.quantile``'s). Float64 throughout.

    Args:
        x, y: 1-D tensors of ``n`` positive values.
        indices: ``(n_boot, n)`` integer tensor, each row the positions of one resample.
        level: the interval's coverage, e.g. 0.9.

    Returns:
        ``(lo, hi)`` as Python floats.

    Example:
        >>> x = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64).exp()  # log x = 0, 1, 2
        >>> y = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).exp()  # log y = 1, 0, 0
        >>> idx = torch.tensor([[0, 1, 2], [0, 0, 1], [1, 2, 2], [2, 2, 2], [0, 2, 2]])
        >>> bootstrap_interval(x, y, idx, level=0.5)  # slopes -0.5, -1, 0, (none), -0.5
        (-0.625, -0.375)
    """
    for name, t in (("x", x), ("y", y)):
        check_positive_tensor(name, check_tensor(name, t, ndim=1, shape="(n,)"))
    if x.shape != y.shape:
        raise ValueError(f"x and y must hold the same n points, got {x.numel()} and {y.numel()}")
    check_ids("indices", indices, x.numel(), ndim=2, shape="(n_boot, n)")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    u, v = x.double().log()[indices], y.double().log()[indices]  # (n_boot, n)
    keep = ~(u == u[:, :1]).all(1)  # resamples with at least two distinct x
    u, v = u[keep], v[keep]
    if u.shape[0] == 0:
        raise ValueError("every resample has a single distinct x: no slope to bootstrap")
    u_c = u - u.mean(1, keepdim=True)
    slopes = (u_c * (v - v.mean(1, keepdim=True))).sum(1) / (u_c * u_c).sum(1)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64,
                     device=slopes.device)
    lo, hi = torch.quantile(slopes, q).tolist()
    return float(lo), float(hi)


def bootstrap_power_law(x: ArrayLike, y: ArrayLike, n_boot: int = 1000, level: float = 0.9,
                        seed: int = 0) -> PowerLawFit:
    """:func:`fit_power_law` and a percentile bootstrap interval of its exponent (points resampled).

    The resamples are drawn with ``numpy.random.default_rng(seed)``; the interval is
    :func:`bootstrap_interval`'s.

    Example:
        >>> x = torch.logspace(0, 3, 8, dtype=torch.float64)
        >>> fit = bootstrap_power_law(x, 2 * x**-0.5, n_boot=50)
        >>> round(fit.exponent, 6), fit.exponent_ci[0] <= -0.5 <= fit.exponent_ci[1]
        (-0.5, True)
    """
    x64 = torch.from_numpy(_positive("x", x).ravel())  # numpy's resamples: on the CPU
    y64 = torch.from_numpy(_positive("y", y).ravel())
    k, c = fit_power_law(x64, y64)
    rng = np.random.default_rng(seed)
    indices = np.stack([rng.integers(0, x64.numel(), x64.numel()) for _ in range(n_boot)])
    lo, hi = bootstrap_interval(x64, y64, torch.from_numpy(indices), level)
    return PowerLawFit(k, c, (lo, hi), level)


def _huber(r: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber's loss of residuals ``r`` and its derivative."""
    small = np.abs(r) <= delta
    value = np.where(small, 0.5 * r**2, delta * (np.abs(r) - 0.5 * delta))
    grad = np.where(small, r, delta * np.sign(r))
    return value, grad


def chinchilla_objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray,
                         log_loss: np.ndarray, delta: float = 1e-3) -> tuple[float, np.ndarray]:
    r"""Approach 3's objective and gradient at :math:`\theta = (a, b, e, \alpha, \beta)`.

    .. math:: \sum_i \mathrm{Huber}_\delta\Big(\mathrm{LSE}(a - \alpha \log N_i,\;
              b - \beta \log D_i,\; e) - \log L_i\Big), \quad A = e^a,\, B = e^b,\, E = e^e
    """
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])  # (3, n)
    top = terms.max(0)
    weights = np.exp(terms - top)
    lse = top + np.log(weights.sum(0))
    soft = weights / weights.sum(0)  # d LSE / d term
    value, dr = _huber(lse - log_loss, delta)
    grad = np.array([(dr * soft[0]).sum(), (dr * soft[1]).sum(), (dr * soft[2]).sum(),
                     -(dr * soft[0] * log_n).sum(), -(dr * soft[1] * log_d).sum()])
    return float(value.sum()), grad


def _linear_starts(log_n: np.ndarray, log_d: np.ndarray, loss: np.ndarray,
                   exponents: Iterable[float], keep: int) -> list[np.ndarray]:
    """Starts for approach 3: for each (alpha, beta) of a grid, the best non-negative (E, A, B).

    With the exponents fixed, :math:`E + A N^{-\\alpha} + B D^{-\\beta}` is linear in
    :math:`(E, A, B)`: a non-negative least-squares solve gives them at once.
    """
    from scipy.optimize import nnls

    scored = []
    for alpha, beta in itertools.product(exponents, exponents):
        design = np.stack([np.ones_like(log_n), np.exp(-alpha * log_n), np.exp(-beta * log_d)], 1)
        coef, _ = nnls(design, loss)
        pred = design @ coef
        if np.all(pred > 0):
            err = float(np.sum((np.log(pred) - np.log(loss)) ** 2))
            e, a, b = (math.log(max(c, 1e-8)) for c in coef)
            scored.append((err, np.array([a, b, e, alpha, beta])))
    scored.sort(key=lambda item: item[0])
    return [theta for _, theta in scored[:keep]]


def fit_chinchilla(n_params: ArrayLike, n_tokens: ArrayLike, loss: ArrayLike,
                   delta: float = 1e-3, exponents: Sequence[float] | None = None,
                   keep: int = 8) -> ChinchillaFit:
    r"""Hoffmann et al.'s approach 3: fit :math:`E + A/N^\alpha + B/D^\beta` to measured losses.

    Minimises :func:`chinchilla_objective` (a Huber loss, :math:`\delta = 10^{-3}`, on the
    difference of log losses, so that a few outlying runs weigh little) with L-BFGS
    (``scipy.optimize.minimize``) from a grid of starts, and keeps the best, as the paper does.
    The paper's grid is a brute-force product over all five parameters (:math:`\alpha, \beta
    \in \{0, 0.5, \dots, 2\}`, :math:`e \in \{-1, -0.5, \dots, 1\}`, :math:`a, b \in \{0, 5,
    \dots, 25\}`: 4,500 starts); here the grid is over the exponents alone, each start's
    :math:`E, A, B` solved by non-negative least squares (the law is linear in them), and
    L-BFGS runs from the ``keep`` best starts: the same search, in a second instead of minutes.

    Example:
        >>> n = np.array([1e3, 3e3, 1e4, 3e4, 1e5] * 3)
        >>> d = np.repeat([1e5, 1e6, 1e7], 5)
        >>> truth = ChinchillaFit(E=1.5, A=20.0, B=60.0, alpha=0.4, beta=0.3)
        >>> fit = fit_chinchilla(n, d, truth.loss(n, d))
        >>> round(fit.alpha, 3), round(fit.beta, 3), round(fit.E, 3)
        (0.4, 0.3, 1.5)
    """
    from scipy.optimize import minimize

    log_n = np.log(_positive("n_params", n_params)).ravel()
    log_d = np.log(_positive("n_tokens", n_tokens)).ravel()
    values = _positive("loss", loss).ravel()
    if not log_n.size == log_d.size == values.size or log_n.size < 5:
        raise ValueError(f"need at least 5 runs with N, D and loss each, got {log_n.size}, "
                         f"{log_d.size}, {values.size}")
    grid: Iterable[float] = np.linspace(0.05, 1.5, 30) if exponents is None else exponents
    best = None
    for start in _linear_starts(log_n, log_d, values, grid, keep):
        result = minimize(chinchilla_objective, start, args=(log_n, log_d, np.log(values), delta),
                          jac=True, method="L-BFGS-B",
                          options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000})
        if best is None or result.fun < best.fun:
            best = result
    if best is None:
        raise ValueError(f"no start to fit from: no exponents in the grid predict positive losses, "
                         f"or keep={keep}")
    a, b, e, alpha, beta = best.x
    return ChinchillaFit(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=float(alpha),
                         beta=float(beta))


@dataclass(frozen=True)
class IsoFlopMinimum:
    """The bottom of one IsoFLOP profile (approach 2)."""

    flops: float
    n_opt: float  # the parabola's minimum in log N
    d_opt: float  # C / (6 N_opt)
    loss: float  # the parabola's value there
    coefficients: tuple[float, float, float]  # loss = c0 + c1 log N + c2 (log N)^2


def isoflop_minimum(flops: float, n_params: ArrayLike, loss: ArrayLike) -> IsoFlopMinimum:
    r"""Hoffmann et al.'s approach 2 at one budget: a parabola in :math:`\log N` through the losses.

    Raises:
        ValueError: fewer than three sizes, or a parabola that opens downwards (no minimum:
            the profile's sizes do not bracket the optimum).

    Example:
        >>> n = np.array([1e3, 1e4, 1e5])
        >>> m = isoflop_minimum(6e9, n, 2 + 0.1 * np.log(n / 1e4) ** 2)
        >>> round(m.n_opt), round(m.d_opt)
        (10000, 100000)
    """
    check_positive("flops", flops)
    log_n = np.log(_positive("n_params", n_params)).ravel()
    values = np.asarray(loss, dtype=np.float64).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError(f"loss must be finite, got {values.tolist()}")
    if log_n.size < 3 or values.size != log_n.size:
        raise ValueError(f"a parabola needs at least 3 sizes with a loss each, got {log_n.size}")
    c2, c1, c0 = np.polyfit(log_n, values, 2)
    if c2 <= 0:
        raise ValueError(f"the IsoFLOP profile at C={flops:.3g} has no minimum (curvature "
                         f"{c2:.3g} <= 0): its sizes do not bracket the optimum")
    x = -c1 / (2 * c2)
    n_opt = math.exp(x)
    return IsoFlopMinimum(flops, n_opt, flops / (6 * n_opt), float(c0 + c1 * x + c2 * x * x),
                          (float(c0), float(c1), float(c2)))
