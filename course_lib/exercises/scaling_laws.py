"""Graded exercises of chapter 5, "How large are the models": references, hidden cases, slips.

Every exercise is solvable with plain Python (and torch for the two over tensors). The
reference-call guard fails a solution that calls course_lib's implementation of any exercise of
this chapter: the parameter counts of :mod:`course_lib.counting` (and chapter 4's
:func:`course_lib.gpt.gpt_params`), the FLOP counts and MFU of :mod:`course_lib.flops`, and the
fits and laws of :mod:`course_lib.scaling`.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import math

import torch

from course_lib import counting, flops, gpt, scaling
from course_lib.exercises._common import f32, f64, gen
from course_lib.grading import Case, Exercise, Slip


# 1. param_count --------------------------------------------------------------------------------


def param_count(d_model: int, n_layers: int, vocab_size: int, n_ctx: int, tied: bool = True,
                biases: bool = True) -> int:
    """Reference: :func:`course_lib.counting.gpt_param_count` (MLP width ``4 d``)."""
    return counting.gpt_param_count(d_model, n_layers, vocab_size, n_ctx, tied=tied,
                                    biases=biases)


def _count_cases() -> list[Case]:
    def case(d: int, L: int, V: int, T: int, tied: bool, biases: bool):
        return lambda: {"d_model": d, "n_layers": L, "vocab_size": V, "n_ctx": T, "tied": tied,
                        "biases": biases}
    return [
        Case("a GPT-2-sized model, tied, with biases", case(1024, 24, 50257, 1024, True, True)),
        Case("a small model, untied, with biases", case(64, 3, 83, 128, False, True)),
        Case("a small model, tied, no biases", case(48, 2, 65, 64, True, False)),
        Case("untied and no biases", case(96, 5, 1000, 256, False, False)),
        Case("one layer", case(16, 1, 27, 32, True, True)),
        Case("no layers: embeddings and the final norm only", case(32, 0, 50, 16, False, True)),
    ]


def _count_slip(kind: str):
    def count(d_model, n_layers, vocab_size, n_ctx, tied=True, biases=True):
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
    def case(n: float, L: int, T: int, d: int):
        return lambda: {"n_params": n, "n_layers": L, "n_ctx": T, "d_model": d}
    return [
        Case("GPT-3-sized", case(174.6e9, 96, 2048, 12288)),
        Case("a small model, long context", case(1.2e5, 4, 4096, 48)),
        Case("one layer", case(3312.0, 1, 64, 16)),
        Case("context of one token", case(5e6, 8, 1, 256)),
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
    def case(n: float, D: float, L: int = 0, T: int = 0, d: int = 0):
        return lambda: {"n_params": n, "n_tokens": D, "n_layers": L, "n_ctx": T, "d_model": d}
    return [
        Case("GPT-3 175B, attention left out", case(175e9, 300e9)),
        Case("a small run with attention", case(25472.0, 6.5e6, 2, 64, 32)),
        Case("a large context", case(1e9, 2e10, 24, 8192, 2048)),
        Case("no tokens", case(1e6, 0.0, 4, 128, 64)),
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
    def case(tps: float, n: float, peak: float):
        return lambda: {"tokens_per_second": tps, "n_params": n, "peak_flops": peak}
    return [
        Case("a GPU run", case(3.2e5, 124e6, 312e12)),
        Case("a CPU run", case(5.1e4, 1.0e5, 1.5e11)),
        Case("a large model", case(1.5e3, 70e9, 989e12)),
        Case("idle", case(0.0, 1e6, 1e12)),
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


# 5. fit_power_law ------------------------------------------------------------------------------


def _power_cases() -> list[Case]:
    def noisy(seed: int, n: int, k: float, c: float, dtype: torch.dtype, lo: float, hi: float):
        def build() -> dict:
            x = torch.logspace(lo, hi, n, dtype=torch.float64)
            noise = torch.exp(0.05 * torch.randn(n, generator=gen(seed), dtype=torch.float64))
            return {"x": x.to(dtype), "y": (c * x**k * noise).to(dtype)}
        return build
    return [
        Case("float64, a falling law with noise", noisy(0, 9, -0.3, 12.0, f64, 3, 6)),
        Case("float32, a falling law with noise", noisy(1, 7, -0.08, 4.5, f32, 3, 5), rtol=1e-3,
             atol=1e-6),
        Case("float64, a rising law with noise", noisy(2, 6, 0.5, 0.02, f64, 10, 13)),
        Case("float64, two points (exact)", lambda: {
            "x": torch.tensor([2.0, 8.0], dtype=f64), "y": torch.tensor([5.0, 2.5], dtype=f64)}),
        Case("float32, an exact law", lambda: {
            "x": torch.tensor([1e3, 1e4, 1e5, 1e6], dtype=f32),
            "y": torch.tensor([3.0, 3.0 * 10**-0.2, 3.0 * 10**-0.4, 3.0 * 10**-0.6],
                              dtype=f32)}, rtol=1e-3, atol=1e-6),
    ]


def _power_slip(kind: str):
    def fit(x, y):
        x64, y64 = x.double(), y.double()
        log = torch.log10 if kind == "log10" else torch.log
        lx, ly = log(x64), log(y64)
        if kind == "swapped":
            lx, ly = ly, lx
        if kind == "linear":
            lx, ly = x64, y64
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
    Slip("regress log y on log x (x is the input): you fitted log x on log y",
         _power_slip("swapped")),
    Slip("a power law is a straight line in log-log: take the logarithms of x and y first",
         _power_slip("linear")),
)


# 6. chinchilla_loss ----------------------------------------------------------------------------


def _chinchilla_cases() -> list[Case]:
    def case(seed: int, shape: tuple[int, ...], dtype: torch.dtype, **constants: float):
        def build() -> dict:
            g = gen(seed)
            n = 10 ** (3 + 8 * torch.rand(shape, generator=g, dtype=torch.float64))
            d = 10 ** (5 + 8 * torch.rand(shape, generator=g, dtype=torch.float64))
            return {"n_params": n.to(dtype), "n_tokens": d.to(dtype), **constants}
        return build
    published = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
    other = {"E": 0.8, "A": 25.0, "B": 900.0, "alpha": 0.45, "beta": 0.2}
    return [
        Case("float64, the published constants", case(0, (6,), f64, **published)),
        Case("float32, the published constants", case(1, (2, 3), f32, **published)),
        Case("float64, other constants", case(2, (1, 5), f64, **other)),
        Case("float32, other constants, one point", case(3, (1,), f32, **other)),
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


# 7. compute_optimal ----------------------------------------------------------------------------


def compute_optimal(flops: float, A: float, B: float, alpha: float, beta: float,
                    ) -> tuple[float, float]:
    """Reference: :func:`course_lib.scaling.compute_optimal` (``E`` does not matter)."""
    return scaling.compute_optimal(flops, 0.0, A, B, alpha, beta)


def _optimal_cases() -> list[Case]:
    def case(C: float, A: float, B: float, alpha: float, beta: float):
        return lambda: {"flops": C, "A": A, "B": B, "alpha": alpha, "beta": beta}
    return [
        Case("Gopher's budget, the published constants", case(5.76e23, 406.4, 410.7, 0.34, 0.28)),
        Case("a small budget, the published constants", case(1e12, 406.4, 410.7, 0.34, 0.28)),
        Case("equal exponents", case(1e20, 50.0, 200.0, 0.3, 0.3)),
        Case("a data-hungry law", case(3.2e15, 12.0, 700.0, 0.6, 0.25)),
    ]


def _optimal_slip(kind: str):
    def solve(flops, A, B, alpha, beta):
        budget = flops if kind == "no_six" else flops / 6
        g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
        a, b = beta / (alpha + beta), alpha / (alpha + beta)
        if kind == "exponents":
            a, b = b, a
        if kind == "g_inverted":
            g = 1 / g
        n = g * budget**a
        return n, (budget**b / g if kind != "d_from_c" else flops / n)
    return solve


_OPTIMAL_SLIPS = (
    Slip("the budget is C = 6 N D: solve with N D = C / 6", _optimal_slip("no_six")),
    Slip("N_opt grows as (C/6)^(beta / (alpha + beta)) and D_opt as (C/6)^(alpha / (alpha + "
         "beta))", _optimal_slip("exponents")),
    Slip("G = (alpha A / (beta B))^(1 / (alpha + beta)) multiplies N_opt and divides D_opt",
         _optimal_slip("g_inverted")),
    Slip("D_opt = C / (6 N_opt): the 6 is in the budget", _optimal_slip("d_from_c")),
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
    Exercise(id="scaling_laws.fit_power_law", reference=scaling.fit_power_law,
             cases=_power_cases, slips=_POWER_SLIPS, forbidden=(scaling.bootstrap_power_law,)),
    Exercise(id="scaling_laws.chinchilla_loss", reference=scaling.chinchilla_loss,
             cases=_chinchilla_cases, slips=_CHINCHILLA_SLIPS,
             forbidden=(scaling.ChinchillaFit,)),
    Exercise(id="scaling_laws.compute_optimal", reference=compute_optimal,
             cases=_optimal_cases, slips=_OPTIMAL_SLIPS, forbidden=(scaling.compute_optimal,)),
]}
