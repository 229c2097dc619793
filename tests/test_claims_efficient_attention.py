"""Chapter 6's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Thresholds leave a margin that another seed or a busier
machine still meets (values measured in full mode at the time of writing, seed 0, on a shared
2-core CPU, in the comments). Times are CPU times of one thread (``time.process_time``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch06]

SLUG = "06-efficient-attention"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_attention_is_quadratic_and_the_lstm_linear(built_book: Path) -> None:
    """Section 1: "attention's time grows with slope X in this run, against F for its FLOP count
    over the same lengths (...), and its memory with slope Y, close to 2, while the LSTM's time
    grows with slope Z and its memory with W, close to 1"; the figure's alt text: "attention's
    lines are the steepest" (the GRU's too are less steep)."""
    flop_slope = value("ch6_flop_slope_attention")
    assert 1.85 < flop_slope < 1.92  # 1.88: 8 n d^2 + 4 n^2 d over n = 512..2048, d = 64
    # Measured over n = 512..2048: 2.11 on a quiet machine, 2.54 with the fast tests running
    # beside it (over n = 256..1024 it went from 1.38 to 1.90). Superlinear, well above the
    # LSTM's, within the "few tenths" of the FLOP slope that the text allows, widened for load.
    time_slope = value("ch6_time_slope_attention")
    assert 1.45 < time_slope < 3.0 and time_slope > value("ch6_time_slope_lstm") + 0.4
    assert 1.7 < value("ch6_memory_slope_attention") < 2.2  # 1.88
    assert 0.6 < value("ch6_time_slope_lstm") < 1.4  # 0.98
    assert 0.7 < value("ch6_memory_slope_lstm") < 1.2  # 0.94
    assert time_slope > value("ch6_time_slope_gru") + 0.4  # 0.99
    assert value("ch6_memory_slope_attention") > value("ch6_memory_slope_gru") + 0.4  # 1.00


def test_attention_overtakes_the_lstm_beyond_the_flop_crossover(built_book: Path) -> None:
    """Section 1: "more memory than the LSTM from n = X on and more time from n = Y on, both
    above the FLOP crossover n = 2d = 128"; the GRU takes Z times as long as the LSTM."""
    assert 128 < value("ch6_memory_crossover_lstm") < 512  # 244
    assert 128 < value("ch6_time_crossover_lstm") < 1024  # 289 to 426
    assert value("ch6_cost_longest_n") == 2048
    assert value("ch6_gru_over_lstm_time") > 1.5  # 6.7 to 8.5


def test_receptive_field_grows_linearly_with_depth(built_book: Path) -> None:
    """Section 2: "four layers span 17 positions (2 * 4 * 2 + 1) and with dilation 2, 33"."""
    assert value("ch6_span_window_4") == 17
    assert value("ch6_span_dilated_4") == 33


def test_layers_to_connect_the_ends_are_measured(built_book: Path) -> None:
    """Section 2, after exercise 2: "A window of 2 on each side needs 16 layers to connect the
    ends of 33 positions, ceil((n - 1) / w) = 32 / 2 ... One global token brings it down to 2,
    dilation 2 to 8 over 33 positions, while over 34 positions ... the receptive field's entry
    for the last output and the first input is still 0"."""
    assert value("ch6_layers_window_33") == 16
    assert value("ch6_layers_global_33") == 2
    assert value("ch6_layers_dilated_33") == 8
    assert value("ch6_layers_dilated_34_reached") == 0


def test_block_sparse_equals_dense_and_grows_linearly(built_book: Path) -> None:
    """Section 2: block-sparse equals dense under the same mask to float64 rounding; its time and
    memory grow about linearly, the dense path's about quadratically."""
    assert value("ch6_block_sparse_diff") < 1e-12  # 4.4e-16
    assert value("ch6_sparse_time_slope") < 1.4  # 0.69 to 0.84
    assert 0.8 < value("ch6_sparse_memory_slope") < 1.2  # 1.00
    assert value("ch6_dense_time_slope") > 1.6  # 2.4 to 2.7
    assert 1.8 < value("ch6_dense_memory_slope") < 2.2  # 2.00


def test_linear_attention_forms_agree_and_generation_is_constant(built_book: Path) -> None:
    """Section 3: the three forms agree in float64 (1e-10); from a prefix of 16384 down to 256,
    softmax with a cache grows X-fold, linear attention changes by a factor of Y: constant."""
    assert value("ch6_linear_max_diff") < 1e-10  # 8.9e-16
    assert value("ch6_gen_longest_prefix") == 16384
    assert value("ch6_gen_softmax_growth") > 8  # 33 to 42
    assert 0.6 < value("ch6_gen_linear_growth") < 1.6  # 0.95 to 1.13 (timed in rounds)


def test_linear_attention_pays_in_recall(built_book: Path) -> None:
    """Section 3: "The softmax model has N parameters and the linear one N: the feature map phi
    adds none. On 2,000 held-out sequences softmax attention answers X of the queries and linear
    attention Y"; the
    figure's alt text: over the last 10 training steps "softmax's loss falls to A, linear
    attention's only to B" (chance: ln 16 = 2.77)."""
    assert value("ch6_recall_params_softmax") == value("ch6_recall_params_linear")  # 6928
    assert value("ch6_recall_params_softmax") == 6928
    assert value("ch6_recall_acc_softmax") > 0.9  # 0.996 to 1.000 (0.9995 in the notebook)
    assert value("ch6_recall_acc_linear") < 0.75  # 0.31 to 0.44 (0.31 in the notebook)
    assert value("ch6_recall_acc_softmax") - value("ch6_recall_acc_linear") > 0.25
    softmax_loss, linear_loss = value("ch6_recall_loss_softmax"), value("ch6_recall_loss_linear")
    assert softmax_loss < 0.5  # 0.026
    assert linear_loss > softmax_loss + 0.5 and linear_loss < math.log(16)  # 2.28


def test_positive_random_features_approach_softmax_and_fourier_features_do_not(
        built_book: Path) -> None:
    """Section 3, Performer: "elu + 1 ... stay X away from softmax's ... Performer's positive
    features start further off, Y with 16 features, and close in as m grows ... pass elu + 1 from
    m = M on and reach Z at m = 4096. The random Fourier features ... are off by U at m = 16 (more
    than 1 ...) and still by V at m = 4096"; "What the papers found" repeats Z, X and U."""
    elu, first, last = (value("ch6_elu_distance"), value("ch6_prf_distance_16"),
                        value("ch6_prf_distance_max"))
    assert value("ch6_prf_m_max") == 4096
    assert first > elu  # "start further off"
    assert last < 0.7 * elu and last < 0.5 * first  # "close in", "pass elu + 1"
    assert value("ch6_prf_beats_elu_m") in (64, 256, 1024, 4096)  # "from m = M on"
    assert value("ch6_fourier_distance_16") > 1  # "more than 1"
    assert value("ch6_fourier_distance_max") > last  # "still" off, behind the positive ones


def test_trained_attention_is_close_to_low_rank(built_book: Path) -> None:
    """Section 4: 90% of the energy of the 64 x 64 attention matrices in X singular values on
    average, at most Y: far fewer than 64; validation loss V nats per character (the training
    figure's alt text: against 4.42, ln 83, for a uniform guess)."""
    assert value("ch6_val_loss") < 3.0 < math.log(83)  # 2.60
    assert value("ch6_rank90_mean") < 20  # 6.1
    assert value("ch6_rank90_max") < 32  # 7.6


def test_random_projections_approximate_poorly(built_book: Path) -> None:
    """Section 4: at k = 16 the best rank-k approximation errs by X (small), random Linformer by
    Y (large); the random projection of theorem 1 is still far off at k = 48."""
    assert value("ch6_svd_error_16") < 0.05  # 0.0018
    assert value("ch6_linformer_error_16") > 10 * value("ch6_svd_error_16")  # 2.5
    assert value("ch6_linformer_error_16") > 0.3
    assert value("ch6_jl_error_48") > 0.2 and value("ch6_jl_error_4") > 0.2  # 0.72 to 1.12


def test_tiled_attention_is_exact_in_a_fraction_of_the_memory(built_book: Path) -> None:
    """Section 5: equal to PyTorch's SDPA in values and gradients (float64 1e-10, float32 1e-5);
    at n = 4096 the tiled path needs X of the naive path's peak memory."""
    assert value("ch6_online_softmax_diff") < 1e-6  # 6e-8
    assert value("ch6_tiled_diff_float64") < 1e-10  # 6.2e-15
    assert value("ch6_tiled_diff_float32") < 1e-5  # 1.6e-6
    assert value("ch6_tiled_n") == 4096
    assert value("ch6_naive_mib") > 100  # 129
    assert value("ch6_tiled_memory_ratio") < 0.1  # 0.016
    assert abs(value("ch6_tiled_mib") / value("ch6_naive_mib")
               - value("ch6_tiled_memory_ratio")) < 1e-3


def test_entmax_and_sparsemax_zero_out_weights(built_book: Path) -> None:
    """Section 6: X of the allowed weights are exactly zero under 1.5-entmax (at least Z in every
    head) and Y under sparsemax."""
    assert value("ch6_zeros_entmax15") > 0.2  # 0.56 to 0.74
    assert value("ch6_zeros_entmax15_min") > 0.05  # 0.34 to 0.55
    assert value("ch6_zeros_sparsemax") > value("ch6_zeros_entmax15")  # 0.84 to 0.92


def test_entmax_trained_with_a_learnable_alpha(built_book: Path) -> None:
    """Section 6: trained with entmax, the model (softmax's parameters plus 4) answers X of the
    queries, as softmax attention does; on average Z of the query's weights are exactly zero,
    from Z1 to Z2 per head; the learned alpha range from A1 to A2 and move little from 1.5."""
    assert value("ch6_entmax_recall_params") == value("ch6_recall_params_softmax") + 4
    acc = value("ch6_entmax_recall_acc")  # 0.999 to 1.000
    assert acc > 0.9 and abs(acc - value("ch6_recall_acc_softmax")) < 0.05
    zmin, zmax = value("ch6_entmax_trained_zeros_min"), value("ch6_entmax_trained_zeros_max")
    assert 0.1 < zmin < zmax <= 1  # 0.68 and 0.93 in the notebook (0.39 to 0.98 over seeds)
    assert zmin <= value("ch6_entmax_trained_zeros") <= zmax
    assert value("ch6_entmax_trained_zeros") > 0.3  # 0.85
    amin, amax = value("ch6_entmax_alpha_min"), value("ch6_entmax_alpha_max")
    assert 1.3 < amin <= amax < 1.7  # 1.53 to 1.60 (1.49 to 1.63 over seeds)


def test_importance_tells_the_heads_that_matter(built_book: Path) -> None:
    """Section 7: keeping the 4 most important heads costs less than keeping the 4 least
    important; no head at all costs the most; "every difference here is below a tenth of a nat"
    (one run: worded as an illustration)."""
    full, half = value("ch6_prune_loss_all"), value("ch6_prune_loss_half")  # 2.568, 2.585
    reverse, none = value("ch6_prune_loss_half_reverse"), value("ch6_prune_loss_none")
    assert half < reverse  # 2.585 < 2.614
    assert full <= half + 0.01
    assert none > max(full, half)  # 2.64
    assert none - full < 0.1 and reverse - half < 0.1  # 0.056 and 0.027: below a tenth


def test_the_summary_table(built_book: Path) -> None:
    """Section 8: at n = 2048 tiled attention is exact in X of the dense memory; linear attention
    is X times faster, block-sparse Y times; 1.5-entmax takes Z times as long as softmax."""
    assert value("ch6_table_n") == 2048
    assert value("ch6_table_tiled_error") < 1e-5  # 3.7e-7
    assert value("ch6_table_tiled_memory") < 0.2  # 0.049
    assert value("ch6_table_linear_speedup") > 2  # 8 to 11
    assert value("ch6_table_sparse_speedup") > 1.2  # 3.2
    assert value("ch6_table_entmax_slowdown") > 2  # 13 to 17


def test_the_chapter_runs_within_its_stated_time(built_book: Path) -> None:
    """Title: "about 30 seconds on a 2-core CPU, more on a busy machine" (26 s quiet, and the
    whole chapter 24-34 s in bench/chapter_times.py); the bound allows a busy machine."""
    assert value("ch6_seconds") < 90
