"""Chapter 5's graded exercises: the instructor's solutions pass, the references agree with
independent computations, and calling course_lib fails."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from course_lib import counting, flops, gpt, grading, scaling
from course_lib.exercises import scaling_laws as ex5
from tests.conftest import solution

pytestmark = pytest.mark.ch05

SLUG = "05-scaling-laws"
NAMES = ["param_count", "forward_flops_per_token", "training_flops", "mfu", "fit_power_law",
         "chinchilla_loss", "compute_optimal"]


@pytest.mark.parametrize("name", NAMES)
def test_the_instructor_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"scaling_laws.{name}", solution(SLUG, name))
    assert [r.message for r in results if r.message] == []


def test_the_registry_holds_exactly_the_notebook_exercises() -> None:
    assert sorted(ex5.EXERCISES) == sorted(f"scaling_laws.{n}" for n in NAMES)


@pytest.mark.parametrize("bias", [True, False])
def test_param_count_reference_equals_a_built_gpt(bias: bool) -> None:
    config = gpt.GPTConfig(vocab_size=37, block_size=20, n_layer=3, n_head=2, n_embd=12,
                           bias=bias)
    assert ex5.param_count(12, 3, 37, 20, biases=bias) == \
        counting.count_parameters(gpt.GPT(config))


def test_fit_power_law_reference_equals_scipy_on_a_hidden_like_case() -> None:
    x = torch.logspace(3, 6, 9, dtype=torch.float64)
    y = 12.0 * x**-0.3 * torch.exp(0.05 * torch.randn(9, generator=torch.Generator()
                                                       .manual_seed(0), dtype=torch.float64))
    k, c = scaling.fit_power_law(x, y)
    peer = stats.linregress(np.log(x.numpy()), np.log(y.numpy()))
    assert (k, c) == (pytest.approx(peer.slope), pytest.approx(math.exp(peer.intercept)))


def test_compute_optimal_reference_is_the_numerical_optimum() -> None:
    n, d = ex5.compute_optimal(3.2e15, 12.0, 700.0, 0.6, 0.25)
    law = scaling.ChinchillaFit(E=0.0, A=12.0, B=700.0, alpha=0.6, beta=0.25)
    res = optimize.minimize_scalar(lambda ln: float(law.loss(math.exp(ln),
                                                             3.2e15 / 6 / math.exp(ln))),
                                   bounds=(0, 40), method="bounded", options={"xatol": 1e-10})
    assert math.exp(res.x) == pytest.approx(n, rel=1e-4)
    assert 6 * n * d == pytest.approx(3.2e15)


def test_mfu_reference_uses_six_n() -> None:
    assert ex5.mfu(1000.0, 1e6, 2e10) == pytest.approx(0.3)
    assert ex5.mfu(1000.0, 1e6, 2e10) == pytest.approx(flops.mfu(1000.0, 6e6, 2e10))


@pytest.mark.parametrize("name,cheat", [
    ("param_count", lambda d_model, n_layers, vocab_size, n_ctx, tied=True, biases=True:
     counting.gpt_param_count(d_model, n_layers, vocab_size, n_ctx, tied=tied, biases=biases)),
    ("forward_flops_per_token", lambda n_params, n_layers, n_ctx, d_model:
     flops.forward_flops_per_token(n_params, n_layers, n_ctx, d_model)),
    ("training_flops", lambda n_params, n_tokens, n_layers=0, n_ctx=0, d_model=0:
     flops.training_flops(n_params, n_tokens, n_layers, n_ctx, d_model)),
    ("mfu", lambda tokens_per_second, n_params, peak_flops:
     flops.mfu(tokens_per_second, 6 * n_params, peak_flops)),
    ("fit_power_law", lambda x, y: scaling.fit_power_law(x, y)),
    ("chinchilla_loss", lambda n_params, n_tokens, E, A, B, alpha, beta:
     scaling.chinchilla_loss(n_params, n_tokens, E, A, B, alpha, beta)),
    ("compute_optimal", lambda flops, A, B, alpha, beta:
     scaling.compute_optimal(flops, 0.0, A, B, alpha, beta)),
])
def test_calling_course_lib_fails_with_the_reference_message(name: str, cheat) -> None:
    results = grading.evaluate(f"scaling_laws.{name}", cheat)
    assert results and all(r.reference_called for r in results), name
    assert grading.is_reference_call(results[0].message)
