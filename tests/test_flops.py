"""Tests of course_lib.flops: the FLOP counts against torch's FlopCounterMode (an independent
counter), against published totals, and the measurements' sanity."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from course_lib import flops
from course_lib.gpt import GPT, GPTConfig

pytestmark = pytest.mark.ch05


def _counted(model: GPT, x: torch.Tensor, backward: bool = False) -> int:
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if backward:
            out.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("shape", [(2, 16, 2, 83, 32, 3, 32), (1, 24, 3, 11, 16, 2, 9)])
def test_matmul_flops_equal_flop_counter_mode_exactly(shape) -> None:
    """With the step-by-step attention, every product is an mm/addmm/bmm FlopCounterMode sees."""
    L, d, h, V, T, B, t = shape
    config = GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=h, n_embd=d,
                       attn_impl="reference")
    x = torch.randint(V, (B, t), generator=torch.Generator().manual_seed(0))
    expected = flops.gpt_matmul_flops(config, B, t)
    model = GPT(config)
    assert _counted(model, x) == expected["total"]
    # The backward pass does two products per forward product (input and weight gradients).
    assert _counted(model, x, backward=True) == 3 * expected["total"]


def test_fused_attention_is_counted_or_left_out_whole() -> None:
    """The fused kernel is in FlopCounterMode's table on some builds (CUDA flash) and not on
    others (this CPU build): the count is the total or the total less the attention products."""
    config = GPTConfig(vocab_size=83, block_size=32, n_layer=2, n_head=2, n_embd=16)
    x = torch.randint(83, (3, 32), generator=torch.Generator().manual_seed(0))
    expected = flops.gpt_matmul_flops(config, 3, 32)
    assert _counted(GPT(config), x) in (expected["total"],
                                        expected["total"] - expected["attention"])


def test_kaplan_forward_count_is_the_exact_count_less_de_embedding_and_masked_half() -> None:
    """Kaplan's 2N + 2 L n_ctx d: the exact products, without the output layer (not in N) and
    with half the attention square (a causal query sees n_ctx / 2 keys on average); what is left
    is the bias and LayerNorm terms of N, 13 d L + 2 d, 0.13% of it for GPT-2 small."""
    config = GPTConfig()  # GPT-2 small
    T = config.block_size
    exact = flops.gpt_matmul_flops(config, 1, T)
    per_token = (exact["linear"] + exact["attention"] / 2) / T
    n = 12 * config.n_layer * config.n_embd**2 + 13 * config.n_layer * config.n_embd \
        + 2 * config.n_embd
    kaplan = flops.forward_flops_per_token(n, config.n_layer, T, config.n_embd)
    assert 0 < kaplan / per_token - 1 < 2e-3


def test_training_flops_reproduce_gpt3_table_d1() -> None:
    """Brown et al. (2020), Table D.1: 2.60 PF-days for GPT-3 Small (125M, 300B tokens) and
    3.64e3 for GPT-3 175B, both 6 N D."""
    assert flops.training_flops(125e6, 300e9) / flops.PF_DAY == pytest.approx(2.60, rel=0.01)
    assert flops.training_flops(175e9, 300e9) / flops.PF_DAY == pytest.approx(3.64e3, rel=0.01)
    assert flops.GPT3_TRAINING_PF_DAYS * flops.PF_DAY == pytest.approx(3.14e23, rel=0.01)


def test_training_flops_with_attention_is_three_forward_passes() -> None:
    forward = flops.forward_flops_per_token(1e6, 4, 256, 128)
    assert flops.training_flops(1e6, 1000, 4, 256, 128) == pytest.approx(3000 * forward)
    assert flops.training_flops(1e6, 1000) == 6e9


def test_attention_share_grows_with_context_and_matches_its_formula() -> None:
    d, L = 768, 12
    shares = [flops.attention_share(12 * L * d * d, L, n, d) for n in (256, 1024, 8192)]
    assert shares == sorted(shares)
    assert shares[1] == pytest.approx(1024 / (12 * d + 1024))


def test_mfu_and_run_cost() -> None:
    assert flops.mfu(2e3, 6e6, 4e10) == pytest.approx(0.3)
    cost = flops.run_cost(3.14e23, peak_flops=312e12, utilisation=0.5, n_devices=1000,
                          watts=400.0, price_per_kwh=0.1, price_per_gpu_hour=2.0)
    device_hours = 3.14e23 / (312e12 * 0.5) / 3600
    assert cost.gpu_days == pytest.approx(device_hours / 24)
    assert cost.days == pytest.approx(device_hours / 24 / 1000)
    assert cost.energy_mwh == pytest.approx(device_hours * 0.4 / 1000)
    assert cost.rental_cost == pytest.approx(2 * device_hours)
    with pytest.raises(ValueError, match="utilisation"):
        flops.run_cost(1e20, utilisation=1.5)
    with pytest.raises(ValueError, match="peak_flops"):
        flops.mfu(1.0, 1.0, 0.0)


def test_measured_peak_and_throughput_are_plausible() -> None:
    peak = flops.measure_matmul_peak(128, seconds=0.05)
    assert 1e7 < peak < 1e15  # between a slow phone and a large GPU
    config = GPTConfig(vocab_size=83, block_size=32, n_layer=1, n_head=2, n_embd=32)
    tp = flops.measure_training_throughput(config, batch=4, steps=2)
    assert tp.tokens_per_second > 0 and tp.seconds_per_step > 0
    n = 12 * 32 * 32 + 13 * 32 + 2 * 32
    assert tp.flops_per_token == pytest.approx(6 * n + 6 * 32 * 32)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        flops.gpt_matmul_flops(GPTConfig(block_size=8), 1, 9)
    with pytest.raises(ValueError, match="non-negative"):
        flops.forward_flops_per_token(-1, 1, 1, 1)
