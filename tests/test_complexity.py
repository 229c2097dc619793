"""Tests of course_lib.complexity: FLOP formulas, slopes, crossovers, timing and peak memory."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.complexity import (
    SelfAttentionLayer,
    crossover,
    flops,
    loglog_slope,
    make_layer,
    measure,
    peak_memory,
    time_call,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ---- known answers -------------------------------------------------------------------------

def test_flops_formulas_and_crossovers() -> None:
    assert flops("gru", 10, 4) == 12 * 10 * 16
    assert flops("lstm", 10, 4) == 16 * 10 * 16
    assert flops("attention", 10, 4) == 8 * 10 * 16 + 4 * 100 * 4
    for d in (64, 512):
        ns = [2 ** i for i in range(2, 14)]
        at = [flops("attention", n, d) for n in ns]
        assert crossover(ns, at, [flops("gru", n, d) for n in ns]) == pytest.approx(d)
        assert crossover(ns, at, [flops("lstm", n, d) for n in ns]) == pytest.approx(2 * d)


def test_loglog_slope_known_answers() -> None:
    ns = [16, 32, 64, 128]
    assert loglog_slope(ns, [5 * n ** 2 for n in ns]) == pytest.approx(2.0)
    assert loglog_slope(ns, [0.1 * n for n in ns]) == pytest.approx(1.0)
    assert loglog_slope(ns, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)


def test_crossover_cases() -> None:
    ns = [1, 10, 100, 1000]
    assert crossover(ns, [1, 1, 1, 1], [2, 2, 2, 2]) is None          # never more expensive
    assert crossover(ns, [3, 3, 3, 3], [2, 2, 2, 2]) == 1.0           # always
    # Above, below, above: the last crossing counts (noisy timings at small n).
    assert crossover(ns, [3, 1, 1, 30], [2, 2, 2, 2]) == pytest.approx(
        math.exp(math.log(100) + math.log(2) / math.log(30) * math.log(10)))


@pytest.mark.parametrize("device", DEVICES)
def test_peak_memory_counts_live_tensors(device: str) -> None:
    # Sizes are multiples of 512 bytes, so CUDA's caching allocator rounds nothing.
    def two_buffers() -> torch.Tensor:
        a = torch.zeros(1024, 100, device=device)                    # 409,600 bytes
        b = torch.zeros(1024, 100, device=device)                    # 409,600 bytes
        return a + b                                                 # +409,600, then a, b freed

    assert peak_memory(two_buffers, device) == 3 * 409_600

    def sequential() -> None:
        for _ in range(3):
            torch.zeros(262_144, device=device)                      # 1 MiB, freed each time
    assert peak_memory(sequential, device) == 1 << 20


def test_time_call_is_positive_and_ordered() -> None:
    small = time_call(lambda: torch.ones(10).sum(), repeats=3)
    big = time_call(lambda: torch.ones(2_000_000).cumsum(0), repeats=3)
    assert 0 < small < big


# ---- layers and measurements ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gru", "lstm", "attention"])
def test_layers_map_sequences_to_sequences(kind: str) -> None:
    layer = make_layer(kind, 8)
    out = layer(torch.randn(2, 5, 8))
    out = out[0] if isinstance(out, tuple) else out
    assert out.shape == (2, 5, 8)


def test_attention_layer_equals_sdpa() -> None:
    torch.manual_seed(0)
    layer = SelfAttentionLayer(8).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    q, k, v = layer.qkv(x).chunk(3, dim=-1)
    ref = layer.out(torch.nn.functional.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(layer(x), ref, rtol=1e-12, atol=1e-12)


def test_attention_memory_quadratic_rnn_linear() -> None:
    # The scores (n x n floats) dominate attention's peak; the GRU's grows with n only.
    ns = [128, 256, 512]
    att = measure("attention", ns, d=8, repeats=1)
    gru = measure("gru", ns, d=8, repeats=1)
    assert loglog_slope(ns, att.peak_bytes) > 1.6
    assert loglog_slope(ns, gru.peak_bytes) == pytest.approx(1.0, abs=0.2)
    assert att.peak_bytes[-1] >= 512 * 512 * 4                    # at least the scores
    assert len(att.seconds) == 3 and all(t > 0 for t in att.seconds)


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        make_layer("rnn", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind must be one of"):
        flops("transformer", 4, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least two"):
        loglog_slope([1], [1])
    with pytest.raises(ValueError, match="positive n and y"):
        loglog_slope([1, 2], [0, 1])
    with pytest.raises(ValueError, match="equal, non-zero length; got 2, 3, 2"):
        crossover([1, 2], [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="positive lengths"):
        measure("gru", [0, 4], d=4)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        peak_memory(lambda: None, "meta")
    with pytest.raises(ValueError, match="repeats >= 1"):
        time_call(lambda: None, repeats=0)
