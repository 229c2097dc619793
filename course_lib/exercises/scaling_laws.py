"""Graded exercises of chapter 5, "How large are the models": references, hidden cases, slips.

Every exercise is solvable with plain Python, torch and numpy. Seven are warm-ups on a formula or
a procedure that the chapter or the statement prints (``param_count``,
``forward_flops_per_token``, ``training_flops``, ``mfu``, ``chinchilla_loss``,
``fit_power_law``, ``bootstrap_interval``: 9 of 24 points). One is a prediction asked before
the sweep is read (``allocation_prediction``, 2 points: the range of approach 2's exponent; the
answer is only in the notebook's hidden test). Three ask for what the chapter does not print
(13 points): the compute-optimal allocation under the budget (``compute_optimal``,
graded to a relative 1e-10, which a search on the loss values does not reach); the first-order
standard error of an IsoFLOP minimum's ``log N`` under noise on the losses (``isoflop_minimum``,
besides the least-squares vertex; a Monte Carlo estimate does not reach the 1e-6 tolerance); and
a plan under a memory budget (``zero_plan``: the lowest ZeRO stage and the fewest GPUs that hold
an optimizer's training state, with the bytes per parameter worked out from the update rules
that the statement gives, and hidden budgets met exactly or missed by one byte).
``fit_power_law`` and ``bootstrap_interval`` each have a case of float32 points so close
together that only logarithms taken in float64 give the slope (the statements' "compute in
float64").

The reference-call guard fails a solution that calls course_lib's implementation of any exercise:
the parameter counts and state bytes of :mod:`course_lib.counting` (and chapter 4's
:func:`course_lib.gpt.gpt_params`), the FLOP counts and MFU of :mod:`course_lib.flops`, the fits
and laws of :mod:`course_lib.scaling`, and chapter 6's :func:`course_lib.complexity.loglog_slope`.

Case builders use torch, plain Python, the shipped sweep (``isoflop_minimum``, as its statement
says) and :mod:`course_lib.exercises._common` only; every random value comes from
:func:`~course_lib.exercises._common.gen`, so the grading run's secret reaches it. Slips
(:class:`~course_lib.grading.Slip`) are the common mistakes, each with the message its author
reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from course_lib import complexity, counting, flops, gpt, scaling, sweep
from course_lib.exercises._common import Inputs, f32, f64, gen
from course_lib.grading import Case, Exercise, Question, Slip


def _ints(seed: int, *ranges: tuple[int, int]) -> list[int]:
    """One integer from each inclusive range ``(low, high)``, all from seed ``seed``."""
    g = gen(seed)
    return [lo + int(torch.randint(hi - lo + 1, (1,), generator=g)) for lo, hi in ranges]


def _logs(seed: int, *ranges: tuple[float, float]) -> list[float]:
    """One float from each range ``(low, high)``, uniform in its logarithm, from seed ``seed``."""
    g = gen(seed)
    return [float(lo * (hi / lo) ** torch.rand((), generator=g, dtype=f64)) for lo, hi in ranges]


# 1. param_count --------------------------------------------------------------------------------


def param_count(d_model: int, n_layers: int, vocab_size: int, n_ctx: int, tied: bool = True,
                biases: bool = True) -> int:
    """Reference: :func:`course_lib.counting.gpt_param_count` (MLP width ``4 d``)."""
    return counting.gpt_param_count(d_model, n_layers, vocab_size, n_ctx, tied=tied,
                                    biases=biases)


def _count_cases() -> list[Case]:
    def fixed(d: int, L: int, V: int, T: int, tied: bool, biases: bool) -> Inputs:
        return lambda: {"d_model": d, "n_layers": L, "vocab_size": V, "n_ctx": T, "tied": tied,
                        "biases": biases}

    def drawn(seed: int, tied: bool, biases: bool) -> Inputs:
        def build() -> dict[str, Any]:
            d, L, V, T = _ints(seed, (8, 512), (1, 24), (2, 60000), (1, 4096))
            return {"d_model": d, "n_layers": L, "vocab_size": V, "n_ctx": T, "tied": tied,
                    "biases": biases}
        return build
    return [
        Case("a GPT-2-sized model, tied, with biases", fixed(1024, 24, 50257, 1024, True, True)),
        Case("a random model, untied, with biases", drawn(10, False, True)),
        Case("a random model, tied, no biases", drawn(11, True, False)),
        Case("a random model, untied and no biases", drawn(12, False, False)),
        Case("a random model, tied, with biases", drawn(13, True, True)),
        Case("one layer", fixed(16, 1, 27, 32, True, True)),
        Case("no layers: embeddings and the final norm only", fixed(32, 0, 50, 16, False, True)),
    ]


def _count_slip(kind: str) -> Callable[..., int]:
    def count(d_model: int, n_layers: int, vocab_size: int, n_ctx: int, tied: bool = True,
              biases: bool = True) -> int:
        d, b, L = d_model, int(biases), n_layers
        block = 12 * d * d + b * 9 * d + 2 * (d + b * d)
        final = d + b * d
        head = 0 if tied else vocab_size * d
        positions = n_ctx * d
        if kind == "approx":
            return 12 * d * d * L + vocab_size * d
        if kind == "head_always":
            head = vocab_size * d
        elif kind == "head_never":
            head = 0
        elif kind == "no_positions":
            positions = 0
        elif kind == "no_final_norm":
            final = 0
        elif kind == "norm_shift_kept":
            block, final = 12 * d * d + b * 9 * d + 4 * d, 2 * d
        return L * block + final + vocab_size * d + positions + head
    return count


_COUNT_SLIPS = (
    Slip("this is the 12 d^2 L + V d approximation; count the biases, the LayerNorms and the "
         "position table exactly", _count_slip("approx")),
    Slip("with tied=True the output layer is the token embedding itself: count it once",
         _count_slip("head_always")),
    Slip("with tied=False the output layer is a V x d matrix of its own (no bias)",
         _count_slip("head_never")),
    Slip("GPT-2's positions are learned: the position table has n_ctx x d parameters",
         _count_slip("no_positions")),
    Slip("GPT-2 has a final LayerNorm after the last block (a gain, and a shift with biases)",
         _count_slip("no_final_norm")),
    Slip("without biases the LayerNorms have no shift either (GPTConfig(bias=False)): d each",
         _count_slip("norm_shift_kept")),
)


# 2. forward_flops_per_token --------------------------------------------------------------------


def _forward_cases() -> list[Case]:
    def fixed(n: float, L: int, T: int, d: int) -> Inputs:
        return lambda: {"n_params": n, "n_layers": L, "n_ctx": T, "d_model": d}

    def drawn(seed: int) -> Inputs:
        def build() -> dict[str, Any]:
            L, T, d = _ints(seed, (2, 96), (2, 8192), (16, 8192))
            return {"n_params": float(12 * L * d * d + 13 * L * d), "n_layers": L, "n_ctx": T,
                    "d_model": d}
        return build
    return [
        Case("GPT-3-sized", fixed(174.6e9, 96, 2048, 12288)),
        Case("a random model", drawn(20)),
        Case("another random model", drawn(21)),
        Case("one layer", fixed(3312.0, 1, 64, 16)),
        Case("context of one token", fixed(5e6, 8, 1, 256)),
    ]


_FORWARD_SLIPS = (
    Slip("6N is the training cost per token (forward and backward); the forward pass costs 2N "
         "plus attention", lambda n_params, n_layers, n_ctx, d_model:
         6.0 * n_params + 2.0 * n_layers * n_ctx * d_model),
    Slip("the attention scores cost 2 n_ctx d per token in every layer, on top of 2N",
         lambda n_params, n_layers, n_ctx, d_model: 2.0 * n_params),
    Slip("the attention term is paid in each of the n_layers layers",
         lambda n_params, n_layers, n_ctx, d_model: 2.0 * n_params + 2.0 * n_ctx * d_model),
)


# 3. training_flops -----------------------------------------------------------------------------


def _training_cases() -> list[Case]:
    def fixed(n: float, D: float, L: int = 0, T: int = 0, d: int = 0) -> Inputs:
        return lambda: {"n_params": n, "n_tokens": D, "n_layers": L, "n_ctx": T, "d_model": d}

    def drawn(seed: int, attention: bool) -> Inputs:
        def build() -> dict[str, Any]:
            n, D = _logs(seed, (1e4, 1e12), (1e6, 2e13))
            L, T, d = _ints(seed + 1, (1, 96), (1, 8192), (16, 8192)) if attention else (0, 0, 0)
            return {"n_params": n, "n_tokens": D, "n_layers": L, "n_ctx": T, "d_model": d}
        return build
    return [
        Case("GPT-3 175B, attention left out", fixed(175e9, 300e9)),
        Case("a random run, attention left out", drawn(30, False)),
        Case("a random run with attention", drawn(32, True)),
        Case("a small run with attention", fixed(25472.0, 6.5e6, 2, 64, 32)),
        Case("no tokens", fixed(1e6, 0.0, 4, 128, 64)),
    ]


_TRAINING_SLIPS = (
    Slip("that is the forward pass only: training adds the backward pass, about twice the "
         "forward (6ND in all)", lambda n_params, n_tokens, n_layers=0, n_ctx=0, d_model=0:
         n_tokens * (2.0 * n_params + 2.0 * n_layers * n_ctx * d_model)),
    Slip("the attention term is paid three times too (forward and backward): "
         "3 D (2N + 2 L n_ctx d)", lambda n_params, n_tokens, n_layers=0, n_ctx=0, d_model=0:
         6.0 * n_params * n_tokens + 2.0 * n_layers * n_ctx * d_model * n_tokens),
    Slip("the attention term 2 L n_ctx d per token belongs in the count when it is given",
         lambda n_params, n_tokens, n_layers=0, n_ctx=0, d_model=0: 6.0 * n_params * n_tokens),
)


# 4. mfu ----------------------------------------------------------------------------------------


def mfu(tokens_per_second: float, n_params: float, peak_flops: float) -> float:
    """Reference: :func:`course_lib.flops.mfu` with :math:`6N` training FLOPs per token."""
    return flops.mfu(tokens_per_second, 6.0 * n_params, peak_flops)


def _mfu_cases() -> list[Case]:
    def fixed(tps: float, n: float, peak: float) -> Inputs:
        return lambda: {"tokens_per_second": tps, "n_params": n, "peak_flops": peak}

    def drawn(seed: int) -> Inputs:
        def build() -> dict[str, Any]:
            n, peak = _logs(seed, (1e5, 1e11), (1e11, 2e15))
            u = _logs(seed + 1, (0.02, 0.7))[0]
            return {"tokens_per_second": u * peak / (6 * n), "n_params": n, "peak_flops": peak}
        return build
    return [
        Case("a GPU run", fixed(3.2e5, 124e6, 312e12)),
        Case("a random run", drawn(40)),
        Case("another random run", drawn(42)),
        Case("a large model", fixed(1.5e3, 70e9, 989e12)),
        Case("idle", fixed(0.0, 1e6, 1e12)),
    ]


_MFU_SLIPS = (
    Slip("training costs 6N FLOPs per token (forward 2N, backward 4N), not 2N",
         lambda tokens_per_second, n_params, peak_flops:
         2.0 * n_params * tokens_per_second / peak_flops),
    Slip("return a fraction (0.25), not a percentage",
         lambda tokens_per_second, n_params, peak_flops:
         100.0 * 6.0 * n_params * tokens_per_second / peak_flops),
    Slip("MFU is achieved FLOP/s over peak FLOP/s: the peak goes in the denominator",
         lambda tokens_per_second, n_params, peak_flops:
         peak_flops / max(6.0 * n_params * tokens_per_second, 1e-30)),
)


# 5. chinchilla_loss ----------------------------------------------------------------------------

_PUBLISHED = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def _drawn_law(seed: int) -> dict[str, float]:
    """Random constants of E + A/N^alpha + B/D^beta, with alpha != beta and A != B."""
    E, A, B = _logs(seed, (0.5, 3.0), (3.0, 3000.0), (3.0, 3000.0))
    alpha, beta = _logs(seed + 1, (0.15, 0.9), (0.15, 0.9))
    return {"E": E, "A": A, "B": B, "alpha": alpha, "beta": beta}


def _chinchilla_cases() -> list[Case]:
    def case(seed: int, shape: tuple[int, ...], dtype: torch.dtype,
             constants: dict[str, float] | None) -> Inputs:
        def build() -> dict[str, Any]:
            g = gen(seed)
            n = 10 ** (3 + 8 * torch.rand(shape, generator=g, dtype=torch.float64))
            d = 10 ** (5 + 8 * torch.rand(shape, generator=g, dtype=torch.float64))
            law = _drawn_law(seed + 100) if constants is None else constants
            return {"n_params": n.to(dtype), "n_tokens": d.to(dtype), **law}
        return build
    return [
        Case("float64, the published constants", case(50, (6,), f64, _PUBLISHED)),
        Case("float32, the published constants", case(51, (2, 3), f32, _PUBLISHED)),
        Case("float64, other constants", case(52, (1, 5), f64, None)),
        Case("float32, other constants, one point", case(53, (1,), f32, None)),
    ]


_CHINCHILLA_SLIPS = (
    Slip("alpha is the exponent of the parameters (A / N^alpha) and beta that of the tokens "
         "(B / D^beta)", lambda n_params, n_tokens, E, A, B, alpha, beta:
         E + A / n_params**beta + B / n_tokens**alpha),
    Slip("the irreducible loss E is part of the law: E + A/N^alpha + B/D^beta",
         lambda n_params, n_tokens, E, A, B, alpha, beta:
         A / n_params**alpha + B / n_tokens**beta),
    Slip("A pairs with the parameters and B with the tokens",
         lambda n_params, n_tokens, E, A, B, alpha, beta:
         E + B / n_params**alpha + A / n_tokens**beta),
)


# 6. compute_optimal ----------------------------------------------------------------------------


def compute_optimal(flops: float, A: float, B: float, alpha: float, beta: float,
                    ) -> tuple[float, float]:
    """Reference: :func:`course_lib.scaling.compute_optimal` (``E`` does not matter)."""
    return scaling.compute_optimal(flops, 0.0, A, B, alpha, beta)


def _optimal_cases() -> list[Case]:
    def fixed(C: float, A: float, B: float, alpha: float, beta: float) -> Inputs:
        return lambda: {"flops": C, "A": A, "B": B, "alpha": alpha, "beta": beta}

    def drawn(seed: int) -> Inputs:
        def build() -> dict[str, Any]:
            law = _drawn_law(seed)
            return {"flops": _logs(seed + 2, (1e10, 1e26))[0], "A": law["A"], "B": law["B"],
                    "alpha": law["alpha"], "beta": law["beta"]}
        return build
    cases = [
        Case("Gopher's budget, the published constants", fixed(5.76e23, 406.4, 410.7, 0.34, 0.28)),
        Case("a small budget, the published constants", fixed(1e12, 406.4, 410.7, 0.34, 0.28)),
        Case("a random law and budget", drawn(60)),
        Case("another random law and budget", drawn(63)),
        Case("equal exponents", fixed(1e20, 50.0, 200.0, 0.3, 0.3)),
        Case("a data-hungry law", fixed(3.2e15, 12.0, 700.0, 0.6, 0.25)),
    ]
    return [Case(c.name, c.inputs, rtol=_OPTIMAL_RTOL, atol=0.0) for c in cases]


#: The statement's tolerance: the closed form is exact to rounding (1e-15), a search on the
#: values of the loss along the budget stops near 1e-8 (the loss is flat to 1e-16 there).
_OPTIMAL_RTOL = 1e-10


def _optimal_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    try:
        close = all(abs(float(g) / float(e) - 1) < 1e-5 for g, e in zip(got, expected))
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if close:
        return ("within 1e-5 of the optimum but not within 1e-10: a numerical search on the "
                "loss along the budget cannot locate its minimum more precisely than about "
                "1e-8 in float64 (the loss is flat there); derive N_opt from the derivative")
    return None


def _optimal_slip(kind: str) -> Callable[..., tuple[float, float]]:
    def solve(flops: float, A: float, B: float, alpha: float, beta: float) -> tuple[float, float]:
        budget = flops if kind == "no_six" else flops / 6
        g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
        a, b = beta / (alpha + beta), alpha / (alpha + beta)
        if kind == "exponents":
            a, b = b, a
        if kind == "g_inverted":
            g = 1 / g
        if kind == "g_left_out":
            g = 1.0
        if kind == "g_no_root":
            g = alpha * A / (beta * B)
        n = g * budget**a
        return n, (budget**b / g if kind != "d_from_c" else flops / n)
    return solve


_OPTIMAL_SLIPS = (
    Slip("the budget is C = 6 N D: solve with N D = C / 6", _optimal_slip("no_six")),
    Slip("the exponents are swapped: N_opt grows faster when the data term falls faster "
         "(larger beta)", _optimal_slip("exponents")),
    Slip("the constant in front is inverted: a larger A (a costlier parameter term) must make "
         "N_opt larger, not smaller", _optimal_slip("g_inverted")),
    Slip("the constant in front is missing: with A != B or alpha != beta, N_opt is not "
         "(C/6)^a alone", _optimal_slip("g_left_out")),
    Slip("the constant in front needs the same 1/(alpha + beta) power as the rest of the "
         "solution", _optimal_slip("g_no_root")),
    Slip("D_opt = C / (6 N_opt): the 6 is in the budget", _optimal_slip("d_from_c")),
)


# 7. allocation_prediction ---------------------------------------------------------------------

_ALLOCATION_PREDICTION = Question(
    id="scaling_laws.allocation_prediction", choices="abcd",
    hint=("section 6 fits the power law through the IsoFLOP minima: compare its exponent with "
          "the four ranges; section 1's shares of the embeddings say why it lands there"))


# 8. isoflop_minimum ----------------------------------------------------------------------------


def isoflop_minimum(n_params: torch.Tensor, loss: torch.Tensor,
                    sigma: float) -> tuple[float, float, float]:
    """Reference: the least-squares parabola's vertex, its value, and the vertex's standard error.

    The vertex comes from :func:`course_lib.scaling.isoflop_minimum`; the standard error of
    ``log N_opt`` under independent noise of standard deviation ``sigma`` on the losses is the
    first-order one, computed in float64 from the fit's linear map (never printed in the chapter).
    """
    m = scaling.isoflop_minimum(1.0, n_params.double(), loss.double())
    return m.n_opt, m.loss, _vertex_se(n_params, loss, sigma)


def _vertex_se(n_params: torch.Tensor, loss: torch.Tensor, sigma: float,
               only_linear: bool = False) -> float:
    u = np.log(n_params.double().numpy())
    v = loss.double().numpy()
    u = u - u.mean()
    design = np.stack([np.ones_like(u), u, u * u], 1)  # (n, 3)
    fit_map = np.linalg.pinv(design)  # (3, n): coefficients = fit_map @ losses
    _, c1, c2 = fit_map @ v
    # the vertex x = -c1 / (2 c2) moves with the coefficients by (0, dx/dc1, dx/dc2)
    dx_dc = np.array([0.0, -1 / (2 * c2), 0.0 if only_linear else c1 / (2 * c2 * c2)])
    return float(sigma * np.linalg.norm(dx_dc @ fit_map))


def _isoflop_cases() -> list[Case]:
    def profile(budget_index: int, seed: int) -> Inputs:
        def build() -> dict[str, Any]:
            rows = [r for r in sweep.read_csv() if not r["heldout"]]
            budget = sorted({r["budget"] for r in rows})[budget_index]
            group = [r for r in rows if r["budget"] == budget]
            return {"n_params": torch.tensor([r["params_nonembedding"] for r in group], dtype=f64),
                    "loss": torch.tensor([r["val_loss"] for r in group], dtype=f64),
                    "sigma": _logs(seed, (0.002, 0.05))[0]}
        return build

    def drawn(seed: int, n: int, dtype: torch.dtype) -> Inputs:
        def build() -> dict[str, Any]:
            g = gen(seed)
            log_n = torch.linspace(6.0, 11.0, n, dtype=f64) + torch.rand((), generator=g, dtype=f64)
            best = log_n[1] + (log_n[-2] - log_n[1]) * torch.rand((), generator=g, dtype=f64)
            curve = 0.03 + 0.1 * torch.rand((), generator=g, dtype=f64)
            noise = 0.004 * torch.randn(n, generator=g, dtype=f64)
            loss = 1.5 + curve * (log_n - best) ** 2 + noise
            return {"n_params": log_n.exp().to(dtype), "loss": loss.to(dtype),
                    "sigma": _logs(seed + 1, (0.001, 0.03))[0]}
        return build
    return [
        Case("the sweep's smallest budget", profile(0, 73), rtol=1e-6, atol=1e-9),
        Case("the sweep's middle budget", profile(2, 74), rtol=1e-6, atol=1e-9),
        Case("the sweep's largest budget", profile(4, 75), rtol=1e-6, atol=1e-9),
        Case("float64, a noisy profile of 7 sizes", drawn(70, 7, f64), rtol=1e-6, atol=1e-9),
        Case("float32, a noisy profile of 5 sizes", drawn(71, 5, f32), rtol=1e-6, atol=1e-9),
        Case("float64, a noisy profile of 4 sizes", drawn(72, 4, f64), rtol=1e-6, atol=1e-9),
        Case("three sizes: the parabola through them", drawn(76, 3, f64), rtol=1e-6, atol=1e-9),
    ]


def _isoflop_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    try:
        pairs = list(zip(got, expected))
        close = all(abs(float(g) / float(e) - 1) < 1e-3 for g, e in pairs)
        first_two = all(abs(float(g) / float(e) - 1) < 1e-6 for g, e in pairs[:2])
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if close and not first_two:
        return ("within 1e-3 but not within 1e-6: compute in float64 (n_params.double()), a fit "
                "in float32 loses the last digits")
    if first_two and len(pairs) == 3:
        try:
            ratio = float(got[2]) / float(expected[2])
        except (TypeError, ValueError, ZeroDivisionError):
            return None
        if abs(ratio - 1) > 1e-6 and math.isfinite(ratio):
            return (f"the vertex and its value are right; the standard error is {ratio:.3g} "
                    "times the expected one")
    return None


def _isoflop_slip(kind: str) -> Callable[..., tuple[float, float, float]]:
    def locate(n_params: torch.Tensor, loss: torch.Tensor,
               sigma: float) -> tuple[float, float, float]:
        se = _vertex_se(n_params, loss, sigma, only_linear=kind == "c2_exact")
        if kind == "se_variance":
            se = se * se / sigma
        n, v = n_params.double().numpy(), loss.double().numpy()
        if kind == "se_in_n":
            c2, c1, _ = np.polyfit(np.log(n), v, 2)
            se *= math.exp(-c1 / (2 * c2))
        if kind == "argmin":
            i = int(np.argmin(v))
            return float(n[i]), float(v[i]), se
        if kind == "three_points":
            keep = np.argsort(v)[:3]
            n, v = n[keep], v[keep]
        x = n if kind == "linear_n" else np.log(n)
        c2, c1, c0 = np.polyfit(x, v, 2)
        best = -c1 / (2 * c2)
        value = float(c0 + c1 * best + c2 * best * best)
        if kind in ("linear_n", "no_exp"):
            return float(best), value, se
        return float(math.exp(best)), value, se
    return locate


_ISOFLOP_SLIPS = (
    Slip("that is the best measured size; the minimum lies between the sizes: fit the parabola "
         "and take its vertex", _isoflop_slip("argmin")),
    Slip("a parabola through the three lowest points interpolates the noise; fit all the sizes "
         "by least squares", _isoflop_slip("three_points")),
    Slip("fit the parabola in log N, not in N: the profiles are parabolas on a log axis",
         _isoflop_slip("linear_n")),
    Slip("the vertex is a log N: return N_opt = exp(vertex)", _isoflop_slip("no_exp")),
    Slip("the noise moves the curvature c2 too, not only c1: the vertex depends on both",
         _isoflop_slip("c2_exact")),
    Slip("the standard error asked for is that of log N_opt (natural log), not of N_opt",
         _isoflop_slip("se_in_n")),
    Slip("a standard error is in the units of log N and grows like sigma, not like sigma^2",
         _isoflop_slip("se_variance")),
)


# 9. fit_power_law -------------------------------------------------------------------------------


def _power_cases() -> list[Case]:
    def noisy(seed: int, n: int, k: float, c: float, dtype: torch.dtype, lo: float,
              hi: float) -> Inputs:
        def build() -> dict[str, Any]:
            x = torch.logspace(lo, hi, n, dtype=torch.float64)
            noise = torch.exp(0.05 * torch.randn(n, generator=gen(seed), dtype=torch.float64))
            return {"x": x.to(dtype), "y": (c * x**k * noise).to(dtype)}
        return build
    def narrow(seed: int, n: int) -> Inputs:
        def build() -> dict[str, Any]:  # float32 inputs 0.2% apart: their logs need float64
            g = gen(seed)
            x = 1e6 * torch.exp(torch.linspace(0.0, 2e-3, n, dtype=f64)
                                + 1e-4 * torch.rand(n, generator=g, dtype=f64))
            y = 7.0 * x**-0.3 * torch.exp(2e-4 * torch.randn(n, generator=g, dtype=f64))
            return {"x": x.to(f32), "y": y.to(f32)}
        return build
    return [
        Case("float32 inputs close together, computed in float64", narrow(83, 8), rtol=1e-6,
             atol=1e-9),
        Case("float64, a falling law with noise", noisy(80, 9, -0.3, 12.0, f64, 3, 6)),
        Case("float32, a falling law with noise", noisy(81, 7, -0.08, 4.5, f32, 3, 5), rtol=1e-3,
             atol=1e-6),
        Case("float64, a rising law with noise", noisy(82, 6, 0.5, 0.02, f64, 10, 13)),
        Case("float64, two points (exact)", lambda: {
            "x": torch.tensor([2.0, 8.0], dtype=f64), "y": torch.tensor([5.0, 2.5], dtype=f64)}),
        Case("float32, an exact law", lambda: {
            "x": torch.tensor([1e3, 1e4, 1e5, 1e6], dtype=f32),
            "y": torch.tensor([3.0, 3.0 * 10**-0.2, 3.0 * 10**-0.4, 3.0 * 10**-0.6],
                              dtype=f32)}, rtol=1e-3, atol=1e-6),
    ]


def _power_slip(kind: str) -> Callable[..., tuple[float, float]]:
    def fit(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        x64, y64 = x.double(), y.double()
        log = torch.log10 if kind == "log10" else torch.log
        lx, ly = log(x64), log(y64)
        if kind == "swapped":  # log x = a + b log y, inverted to log y = -a/b + (1/b) log x
            ly_c = ly - ly.mean()
            b = float((ly_c * (lx - lx.mean())).sum() / (ly_c * ly_c).sum())
            a = float(lx.mean() - b * ly.mean())
            return 1 / b, math.exp(-a / b)
        if kind == "linear":
            lx, ly = x64, y64
        if kind == "float32":
            lx, ly = torch.log(x.float()), torch.log(y.float())
        lx_c = lx - lx.mean()
        k = float((lx_c * (ly - ly.mean())).sum() / (lx_c * lx_c).sum())
        intercept = float(ly.mean() - k * lx.mean())
        if kind == "log_coefficient":
            return k, intercept
        return k, math.exp(intercept)
    return fit


_POWER_SLIPS = (
    Slip("the intercept is a natural log (log c): return c = exp(intercept)",
         _power_slip("log_coefficient")),
    Slip("the intercept of a base-10 fit is log10(c): undo it with 10**intercept, not exp (or "
         "use natural logs throughout)", _power_slip("log10")),
    Slip("regress log y on log x (x is the input): you fitted log x on log y, which gives "
         "another line as soon as the points are noisy", _power_slip("swapped")),
    Slip("a power law is a straight line in log-log: take the logarithms of x and y first",
         _power_slip("linear")),
    Slip("compute in float64 (x.double()): in float32 the logarithms of close values lose "
         "their differences", _power_slip("float32")),
)


# 10. bootstrap_interval ------------------------------------------------------------------------


def _bootstrap_cases() -> list[Case]:
    def drawn(seed: int, n: int, n_boot: int, level: float, dtype: torch.dtype,
              degenerate: bool = True) -> Inputs:
        def build() -> dict[str, Any]:
            g = gen(seed)
            x = torch.logspace(2, 6, n, dtype=f64) * torch.exp(0.1 * torch.randn(n, generator=g,
                                                                                  dtype=f64))
            y = 5.0 * x**-0.2 * torch.exp(0.08 * torch.randn(n, generator=g, dtype=f64))
            indices = torch.randint(n, (n_boot, n), generator=g)
            if degenerate:  # a resample of one point, repeated: it has no slope
                indices[n_boot // 2] = int(torch.randint(n, (1,), generator=g))
            return {"x": x.to(dtype), "y": y.to(dtype), "indices": indices, "level": level}
        return build
    def narrow(seed: int, n: int, n_boot: int) -> Inputs:
        def build() -> dict[str, Any]:  # float32 inputs 0.2% apart: their logs need float64
            g = gen(seed)
            x = 1e6 * torch.exp(torch.linspace(0.0, 2e-3, n, dtype=f64)
                                + 1e-4 * torch.rand(n, generator=g, dtype=f64))
            y = 7.0 * x**-0.3 * torch.exp(2e-4 * torch.randn(n, generator=g, dtype=f64))
            indices = torch.randint(n, (n_boot, n), generator=g)
            return {"x": x.to(f32), "y": y.to(f32), "indices": indices, "level": 0.9}
        return build
    return [
        Case("float64, 8 points, 400 resamples, 90%", drawn(90, 8, 400, 0.9, f64), rtol=1e-6,
             atol=1e-9),
        Case("float32, 6 points, 250 resamples, 80%", drawn(91, 6, 250, 0.8, f32), rtol=1e-4,
             atol=1e-6),
        Case("float64, 12 points, 1000 resamples, 95%", drawn(92, 12, 1000, 0.95, f64),
             rtol=1e-6, atol=1e-9),
        Case("float64, 5 points, 9 resamples, 50%", drawn(93, 5, 9, 0.5, f64), rtol=1e-6,
             atol=1e-9),
        Case("float64, one resample", drawn(94, 7, 1, 0.9, f64, degenerate=False), rtol=1e-6,
             atol=1e-9),
        Case("float32 inputs close together, computed in float64", narrow(95, 8, 300),
             rtol=1e-6, atol=1e-9),
    ]


def _bootstrap_slip(kind: str) -> Callable[..., tuple[float, float]]:
    def interval(x: torch.Tensor, y: torch.Tensor, indices: torch.Tensor,
                 level: float = 0.9) -> tuple[float, float]:
        u, v = x.double().log()[indices], y.double().log()[indices]
        if kind == "float32":
            u, v = x.float().log()[indices], y.float().log()[indices]
        if kind == "swapped":
            u, v = v, u
        if kind != "no_skip":
            keep = ~(u == u[:, :1]).all(1)
            u, v = u[keep], v[keep]
        u_c = u - u.mean(1, keepdim=True)
        slopes = (u_c * (v - v.mean(1, keepdim=True))).sum(1) / (u_c * u_c).sum(1)
        if kind == "swapped":
            slopes = 1 / slopes
        if kind == "level_as_tails":
            q = [level / 2, 1 - level / 2]
        else:
            q = [(1 - level) / 2, (1 + level) / 2]
        method = "nearest" if kind == "nearest_rank" else "linear"
        lo, hi = torch.quantile(slopes, torch.tensor(q, dtype=slopes.dtype),
                                interpolation=method).tolist()
        return float(lo), float(hi)
    return interval


_BOOTSTRAP_SLIPS = (
    Slip("a resample whose x are all equal has no slope (0/0): skip it before taking the "
         "quantiles", _bootstrap_slip("no_skip")),
    Slip("the central 90% interval runs from the 5% to the 95% quantile: (1 - level)/2 and "
         "(1 + level)/2", _bootstrap_slip("level_as_tails")),
    Slip("interpolate the quantiles linearly between the sorted slopes (torch.quantile's "
         "default), not the nearest rank", _bootstrap_slip("nearest_rank")),
    Slip("each resample's slope regresses log y on log x, not log x on log y",
         _bootstrap_slip("swapped")),
    Slip("compute in float64 (x.double()): in float32 the logarithms of close values lose "
         "their differences", _bootstrap_slip("float32")),
)


# 11. zero_plan --------------------------------------------------------------------------------

#: The 32-bit buffers that each optimizer's update rule carries from one step to the next,
#: besides the master weights (the statement gives the rules, not these counts).
_BUFFERS = {"sgd": 0, "momentum": 1, "adam": 2}
#: What ZeRO's stages split across the GPUs (stage 0 is plain data parallelism).
_SPLIT = {0: (), 1: ("optimizer",), 2: ("optimizer", "gradients"),
          3: ("optimizer", "gradients", "weights")}


def _plan_bytes(n_params: int, n_gpus: int, stage: int, optimizer: str,
                kind: str = "") -> int:
    """Bytes of training state on one GPU; ``kind`` names a slip's variant."""
    buffers = _BUFFERS[optimizer]
    if kind == "adam_hats_kept" and optimizer == "adam":
        buffers = 4  # m, v, and the bias-corrected m-hat and v-hat
    master = 0 if kind == "no_master" else 4
    sizes = {"weights": 2, "gradients": 2, "optimizer": master + 4 * buffers}
    if kind == "fp32_gradients":
        sizes["gradients"] = 4
    split = _SPLIT[stage]
    if kind == "zero1_grads" and stage == 1:
        split = ("optimizer", "gradients")
    if kind == "zero2_no_grads" and stage == 2:
        split = ("optimizer",)
    shard = n_params // n_gpus if kind == "floor" else -(-n_params // n_gpus)
    return sum(size * (shard if state in split else n_params) for state, size in sizes.items())


def _fewest_gpus(fits: Callable[[int], bool], max_gpus: int) -> int | None:
    """The smallest n in 1..max_gpus with fits(n), for a fits that only turns true as n grows."""
    if not fits(max_gpus):
        return None
    lo, hi = 1, max_gpus
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _plan(n_params: int, gpu_bytes: int, max_gpus: int, optimizer: str,
          kind: str) -> tuple[int, int] | None:
    """A slip's plan (``kind`` names it); the reference below does not call it."""
    options = []
    for stage in range(4):
        def fits(n: int, stage: int = stage) -> bool:
            held = _plan_bytes(n_params, n, stage, optimizer, kind)
            return held < gpu_bytes if kind == "strict" else held <= gpu_bytes
        fewest = _fewest_gpus(fits, max_gpus)
        if fewest is not None:
            if kind != "fewest_gpus_first":
                return stage, fewest
            options.append((fewest, stage))
    if options:
        n, stage = min(options)
        return stage, n
    return None


def zero_plan(n_params: int, gpu_bytes: int, max_gpus: int,
              optimizer: str) -> tuple[int, int] | None:
    """Reference: the lowest ZeRO stage whose state fits, on the fewest GPUs."""
    for stage in range(4):
        def fits(n: int, stage: int = stage) -> bool:
            return _plan_bytes(n_params, n, stage, optimizer) <= gpu_bytes
        fewest = _fewest_gpus(fits, max_gpus)
        if fewest is not None:
            return stage, fewest
    return None


def _plan_cases() -> list[Case]:
    def fixed(n: int, memory: int, gpus: int, optimizer: str) -> Inputs:
        return lambda: {"n_params": n, "gpu_bytes": memory, "max_gpus": gpus,
                        "optimizer": optimizer}

    def boundary(seed: int, stage: int, optimizer: str, exact: bool) -> Inputs:
        """A budget that one GPU count of ``stage`` meets exactly (or one byte short of it)."""
        def build() -> dict[str, Any]:
            few = stage < 3  # stages 1 and 2 keep whole copies: models of a few billion
            n_gpus = _ints(seed, (3, 64) if few else (8, 4096))[0]
            psi = int(_logs(seed + 2, (5e8, 8e9) if few else (2e10, 2e12))[0])
            psi += n_gpus * int(_ints(seed + 1, (1, 99))[0]) // 100 + 1  # a padded last shard
            memory = _plan_bytes(psi, n_gpus, stage, optimizer) - (0 if exact else 1)
            return {"n_params": psi, "gpu_bytes": memory,
                    "max_gpus": n_gpus if exact else 2 * n_gpus,
                    "optimizer": optimizer}
        return build

    def drawn(seed: int, optimizer: str) -> Inputs:
        def build() -> dict[str, Any]:
            memory, gpus = _ints(seed, (2 * 10**9, 192 * 10**9), (1, 1 << 20))
            psi = int(_logs(seed + 1, (1e8, 1e13))[0])
            return {"n_params": psi, "gpu_bytes": memory, "max_gpus": gpus,
                    "optimizer": optimizer}
        return build
    return [
        Case("ZeRO's 7.5 billion parameters, 80 GB GPUs, at most 64", fixed(
            7_500_000_000, 80 * 10**9, 64, "adam")),
        Case("GPT-3's 175 billion, 80 GB GPUs, at most 1,024", fixed(
            175 * 10**9, 80 * 10**9, 1024, "adam")),
        Case("25 billion parameters, 80 GB GPUs, at most 64", fixed(
            25 * 10**9, 80 * 10**9, 64, "adam")),
        Case("a model that fits one GPU whole", fixed(10**9, 24 * 10**9, 8, "momentum")),
        Case("too large for the GPUs allowed", fixed(10**12, 80 * 10**9, 64, "adam")),
        Case("adam, a budget met exactly at stage 1", boundary(120, 1, "adam", True)),
        Case("adam, one byte short of a stage-1 plan", boundary(121, 1, "adam", False)),
        Case("momentum, a budget met exactly at stage 2", boundary(122, 2, "momentum", True)),
        Case("adam, a budget met exactly at stage 3", boundary(123, 3, "adam", True)),
        Case("sgd, one byte short of a stage-2 plan", boundary(124, 2, "sgd", False)),
        Case("sgd, a budget met exactly at stage 1", boundary(125, 1, "sgd", True)),
        Case("adam, random sizes", drawn(126, "adam")),
        Case("momentum, random sizes", drawn(127, "momentum")),
        Case("sgd, random sizes", drawn(128, "sgd")),
        Case("adam, more random sizes", drawn(129, "adam")),
    ]


def _plan_slip(kind: str) -> Callable[..., tuple[int, int] | None]:
    def plan(n_params: int, gpu_bytes: int, max_gpus: int,
             optimizer: str) -> tuple[int, int] | None:
        return _plan(n_params, gpu_bytes, max_gpus, optimizer, kind)
    return plan


_PLAN_SLIPS = (
    Slip("the optimizer's state includes the 32-bit master copy of the weights that the update "
         "changes, besides the buffers its rule carries", _plan_slip("no_master")),
    Slip("Adam's m-hat and v-hat are computed afresh from m, v and t at every step: only m and "
         "v are carried from one step to the next", _plan_slip("adam_hats_kept")),
    Slip("the gradients are 16-bit, like the weights the backward pass uses",
         _plan_slip("fp32_gradients")),
    Slip("ZeRO stage 1 splits the optimizer's state only; every GPU keeps all the gradients",
         _plan_slip("zero1_grads")),
    Slip("ZeRO stage 2 splits the gradients too, not only the optimizer's state",
         _plan_slip("zero2_no_grads")),
    Slip("a split state is cut into equal shards of ceil(n_params / n_gpus) parameters (the "
         "last one padded), not floor", _plan_slip("floor")),
    Slip("a state that takes exactly gpu_bytes fits: compare with <=", _plan_slip("strict")),
    Slip("take the lowest stage that fits on at most max_gpus GPUs, then its fewest GPUs; not "
         "the fewest GPUs over all stages", _plan_slip("fewest_gpus_first")),
)


EXERCISES = {ex.id: ex for ex in [
    Exercise(id="scaling_laws.param_count", reference=param_count, cases=_count_cases,
             slips=_COUNT_SLIPS, forbidden=(counting.gpt_param_count, counting.gpt_param_parts,
                                            gpt.gpt_params)),
    Exercise(id="scaling_laws.forward_flops_per_token",
             reference=flops.forward_flops_per_token, cases=_forward_cases,
             slips=_FORWARD_SLIPS),
    Exercise(id="scaling_laws.training_flops", reference=flops.training_flops,
             cases=_training_cases, slips=_TRAINING_SLIPS),
    Exercise(id="scaling_laws.mfu", reference=mfu, cases=_mfu_cases, slips=_MFU_SLIPS,
             forbidden=(flops.mfu,)),
    Exercise(id="scaling_laws.chinchilla_loss", reference=scaling.chinchilla_loss,
             cases=_chinchilla_cases, slips=_CHINCHILLA_SLIPS,
             forbidden=(scaling.ChinchillaFit,)),
    Exercise(id="scaling_laws.compute_optimal", reference=compute_optimal,
             cases=_optimal_cases, slips=_OPTIMAL_SLIPS, diagnose=_optimal_diagnose,
             forbidden=(scaling.compute_optimal, scaling.ChinchillaFit)),
    _ALLOCATION_PREDICTION,
    Exercise(id="scaling_laws.isoflop_minimum", reference=isoflop_minimum,
             cases=_isoflop_cases, slips=_ISOFLOP_SLIPS, diagnose=_isoflop_diagnose,
             forbidden=(scaling.isoflop_minimum,)),
    Exercise(id="scaling_laws.fit_power_law", reference=scaling.fit_power_law,
             cases=_power_cases, slips=_POWER_SLIPS,
             forbidden=(scaling.bootstrap_power_law, complexity.loglog_slope)),
    Exercise(id="scaling_laws.bootstrap_interval", reference=scaling.bootstrap_interval,
             cases=_bootstrap_cases, slips=_BOOTSTRAP_SLIPS,
             forbidden=(scaling.bootstrap_power_law, scaling.fit_power_law,
                        complexity.loglog_slope)),
    Exercise(id="scaling_laws.zero_plan", reference=zero_plan, cases=_plan_cases,
             slips=_PLAN_SLIPS, forbidden=(counting.training_state_bytes,)),
]}
