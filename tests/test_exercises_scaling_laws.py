"""Chapter 5's exercises: the references agree with independent computations (a built GPT,
scipy, numpy, autograd and a simulation of noisy profiles, ZeRO's Figure 1, a search over every
plan).

That the instructor's solutions pass and that calling course_lib fails is checked for every
chapter in tests/test_exercises.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from course_lib import counting, flops, gpt, scaling, sweep
from course_lib.exercises import scaling_laws as ex5
from tests.questions import answer

pytestmark = pytest.mark.ch05


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


def test_isoflop_reference_is_the_least_squares_vertex() -> None:
    """On an exact parabola in log N the minimum is its vertex, between the sizes."""
    n = torch.logspace(3, 5, 6, dtype=torch.float64)
    loss = 2.0 + 0.1 * (n.log() - math.log(5e3)) ** 2
    n_opt, value, se = ex5.isoflop_minimum(n, loss, 0.01)
    assert n_opt == pytest.approx(5e3, rel=1e-9) and value == pytest.approx(2.0, abs=1e-12)
    assert se > 0


def test_allocation_prediction_answer_is_the_shipped_sweeps_exponent() -> None:
    """The hidden answer of exercise 7 is the range of approach 2's exponent on the shipped CSV,
    computed as section 6 computes it (the minima of the five profiles, a power law in C)."""
    rows = [r for r in sweep.read_csv() if not r["heldout"]]
    minima = []
    for budget in sorted({r["budget"] for r in rows}):
        group = [r for r in rows if r["budget"] == budget]
        m = scaling.isoflop_minimum(budget, [r["params_nonembedding"] for r in group],
                                    [r["val_loss"] for r in group])
        minima.append((m.flops, m.n_opt))
    a, _ = scaling.fit_power_law(torch.tensor([c for c, _ in minima], dtype=torch.float64),
                                 torch.tensor([n for _, n in minima], dtype=torch.float64))
    letter = "a" if a < 0.4 else "b" if a <= 0.6 else "c" if a <= 0.85 else "d"
    assert letter == answer("scaling_laws.allocation_prediction"), a


def _vertex(n_params: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """log N at the bottom of numpy's least-squares parabola, differentiable in ``loss``."""
    u = n_params.double().log()
    design = torch.stack([torch.ones_like(u), u, u * u], 1)
    c = torch.linalg.lstsq(design, loss[:, None]).solution[:, 0]
    return -c[1] / (2 * c[2])


def test_isoflop_standard_error_is_the_first_order_spread() -> None:
    """The reference's standard error of log N_opt: autograd's gradient of the vertex times sigma,
    and the spread of the vertex over many noisy copies of the profile at a small sigma."""
    g = torch.Generator().manual_seed(0)
    n = torch.logspace(3, 5, 7, dtype=torch.float64)
    loss = 2.0 + 0.08 * (n.log() - math.log(8e3)) ** 2 + 0.004 * torch.randn(
        7, generator=g, dtype=torch.float64)
    sigma = 1e-4
    _, _, se = ex5.isoflop_minimum(n, loss, sigma)
    leaf = loss.clone().requires_grad_(True)
    _vertex(n, leaf).backward()
    assert leaf.grad is not None
    assert se == pytest.approx(sigma * float(leaf.grad.norm()), rel=1e-9)
    noisy = loss + sigma * torch.randn(20000, 7, generator=g, dtype=torch.float64)
    u = n.log()
    coefficients = noisy @ torch.linalg.pinv(torch.stack([torch.ones_like(u), u, u * u], 1)).T
    spread = (-coefficients[:, 1] / (2 * coefficients[:, 2])).std()
    assert float(spread) == pytest.approx(se, rel=0.03)


def test_isoflop_standard_error_ignores_a_shift_of_every_loss() -> None:
    n = torch.tensor([1e3, 3e3, 1e4, 3e4], dtype=torch.float64)
    loss = torch.tensor([2.3, 2.1, 2.05, 2.2], dtype=torch.float64)
    assert ex5.isoflop_minimum(n, loss + 1.0, 0.01)[2] == pytest.approx(
        ex5.isoflop_minimum(n, loss, 0.01)[2], rel=1e-12)


def test_bootstrap_interval_equals_numpy_on_a_loop() -> None:
    """The reference against a plain loop of numpy fits and numpy's linear quantiles."""
    g = torch.Generator().manual_seed(0)
    x = torch.logspace(1, 4, 7, dtype=torch.float64)
    y = 3.0 * x**-0.3 * torch.exp(0.1 * torch.randn(7, generator=g, dtype=torch.float64))
    idx = torch.randint(7, (300, 7), generator=g)
    idx[5] = 2  # a resample of one point: skipped
    slopes = [np.polyfit(np.log(x.numpy()[r]), np.log(y.numpy()[r]), 1)[0]
              for r in idx.numpy() if np.ptp(x.numpy()[r]) > 0]
    assert len(slopes) < 300
    lo, hi = np.quantile(slopes, [0.05, 0.95])
    assert scaling.bootstrap_interval(x, y, idx, 0.9) == (pytest.approx(lo), pytest.approx(hi))


def test_training_state_bytes_reproduces_zero_figure_1() -> None:
    """Rajbhandari et al. (2020), Figure 1: 7.5B parameters, 64 GPUs: 120, 31.4, 16.6, 1.88 GB."""
    got = [counting.training_state_bytes(7_500_000_000, 64, s) / 1e9
           for s in ("ddp", "zero1", "zero2", "zero3")]
    assert [round(g, 2) for g in got] == [120.0, 31.41, 16.64, 1.88]
    assert counting.training_state_bytes(10, 4, "tensor", 2) == 16 * (2 + 2)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_zero_plan_reference_equals_a_search_over_every_plan(optimizer: str) -> None:
    """The lowest stage, then the fewest GPUs, by trying every stage and GPU count; Adam's bytes
    from counting.training_state_bytes (ZeRO's Figure 1), the others by their buffers."""
    schemes = ["ddp", "zero1", "zero2", "zero3"]
    extra = {"sgd": 8, "momentum": 4, "adam": 0}[optimizer]  # fewer 32-bit bytes than Adam

    def held(psi: int, n: int, stage: int) -> int:
        adam = counting.training_state_bytes(psi, n, schemes[stage])
        shard = -(-psi // n)
        return adam - extra * (shard if stage >= 1 else psi)

    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        psi = int(torch.randint(10**3, 10**6, (1,), generator=g))
        max_gpus = int(torch.randint(1, 70, (1,), generator=g))
        memory = int(torch.randint(10**3, 20 * 10**6, (1,), generator=g))
        plans = [(stage, n) for stage in range(4) for n in range(1, max_gpus + 1)
                 if held(psi, n, stage) <= memory]
        assert ex5.zero_plan(psi, memory, max_gpus, optimizer) == (min(plans) if plans else None)


def test_zero_plan_at_zeros_figure_1() -> None:
    """7.5 billion parameters and Adam: 31.4 GB a GPU under stage 1 on 64 GPUs (ZeRO's Figure 1),
    so 32 GB GPUs take stage 1; 16 GB ones need stage 2 (16.6 GB on 64 GPUs is too much) or 3."""
    assert ex5.zero_plan(7_500_000_000, 32 * 10**9, 64, "adam")[0] == 1
    assert ex5.zero_plan(7_500_000_000, 17 * 10**9, 64, "adam")[0] == 2
    assert ex5.zero_plan(7_500_000_000, 16 * 10**9, 64, "adam")[0] == 3


def test_fp32_adamw_keeps_sixteen_bytes_a_parameter() -> None:
    """The chapter's measurement: float32 weights, gradients and AdamW's two moments."""
    model = gpt.GPT(gpt.GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 8, dtype=torch.long)).square().mean().backward()
    opt.step()
    held = sum(4 * p.numel() * 2 for p in model.parameters())
    held += sum(t.numel() * t.element_size() for s in opt.state.values()
                for k, t in s.items() if k != "step")
    assert held == 16 * counting.count_parameters(model)


def test_mfu_reference_uses_six_n() -> None:
    assert ex5.mfu(1000.0, 1e6, 2e10) == pytest.approx(0.3)
    assert ex5.mfu(1000.0, 1e6, 2e10) == pytest.approx(flops.mfu(1000.0, 6e6, 2e10))
