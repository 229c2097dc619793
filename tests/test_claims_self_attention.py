"""Every measured sentence of chapter 2, asserted from the executed book's glued values.

Each test names the sentence it guards. Thresholds leave a margin that another seed or machine
still meets (measured in full mode; the training claims also with a second seed).
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import glued, glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch02]

SLUG = "02-self-attention"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_every_glued_value_of_the_chapter_is_checked_here(built_book) -> None:
    checked = {
        "ch2_grad_drop_unscaled", "ch2_grad_drop_scaled", "ch2_max_weight_unscaled_2048",
        "ch2_max_weight_scaled_2048", "ch2_padded_rows_ok", "ch2_cache_error",
        "ch2_mha_peer_error", "ch2_equivariant_without_positions", "ch2_relative_map_error",
        "ch2_pe_rises", "ch2_pe_rebound", "ch2_positions_break_symmetry", "ch2_acc_attention",
        "ch2_attention_min_bin", "ch2_acc_gru", "ch2_acc_linear", "ch2_acc_cnn",
        "ch2_stored_chance", "ch2_stored_gru", "ch2_stored_linear", "ch2_one_pair_gru_acc",
        "ch2_one_pair_gru_min_bin", "ch2_flops_crossover", "ch2_flops_ratio_n16",
        "ch2_flops_ratio_n1024", "ch2_path_attention", "ch2_path_conv", "ch2_path_dilated",
        "ch2_final_loss_attention", "ch2_final_loss_gru", "ch2_final_loss_linear",
        "ch2_final_loss_cnn", "ch2_attention_step_below_01", "ch2_others_best_bin",
        "ch2_heads_on_pair", "ch2_heads_best_on_pair",
    }
    assert set(glued(SLUG)) == checked


def test_without_scaling_the_gradient_vanishes_and_the_softmax_saturates(built_book) -> None:
    # "the gradient that reaches the scores shrinks by a factor of X ... the largest weight
    # averages Y (almost one-hot). With the scaling the gradient changes by a factor of only Z"
    assert value("ch2_grad_drop_unscaled") > 3
    assert value("ch2_max_weight_unscaled_2048") > 0.9
    assert 0.8 < value("ch2_grad_drop_scaled") < 1.25
    assert value("ch2_max_weight_scaled_2048") < 0.3


def test_padded_queries_give_zeros_and_finite_gradients(built_book) -> None:
    assert value("ch2_padded_rows_ok") == 1


def test_the_cache_reproduces_causal_attention(built_book) -> None:
    # "reproduces causal attention over the whole sequence to float64 rounding: the largest
    # difference, printed by the cell above, is below 10^-12"
    assert value("ch2_cache_error") < 1e-12


def test_course_lib_multi_head_attention_matches_torch(built_book) -> None:
    # "The largest difference is X, float32 rounding."
    assert value("ch2_mha_peer_error") < 1e-5


def test_attention_without_positions_is_equivariant_and_positions_break_it(built_book) -> None:
    assert value("ch2_equivariant_without_positions") == 1
    assert value("ch2_positions_break_symmetry") == 1


def test_one_matrix_shifts_every_position(built_book) -> None:
    # "One matrix per offset, exact to X for every position."
    assert value("ch2_relative_map_error") < 1e-10


def test_encoding_similarity_oscillates(built_book) -> None:
    # "it grows again X times out of 255, and it climbs as much as Y above the lowest value"
    assert value("ch2_pe_rises") > 50
    assert value("ch2_pe_rebound") > 5


def test_attention_solves_recall_and_the_others_do_not(built_book) -> None:
    # "One attention layer answers X of the test queries, and at least Y in every distance bin.
    # The GRU answers ... and linear mixing ...: well above chance, far from solving the task."
    assert value("ch2_acc_attention") > 0.95 and value("ch2_attention_min_bin") > 0.9
    for name in ("ch2_acc_gru", "ch2_acc_linear"):
        assert 0.15 < value(name) < 0.6, name
    # "the dilated CNN ... within this budget it stays near chance" (chance = 1/16)
    assert value("ch2_acc_cnn") < 0.15


def test_the_gru_and_linear_mixing_answer_a_stored_value(built_book) -> None:
    # "X (GRU) and Y (linear mixing) are one of the values stored somewhere in the sequence,
    # where a uniform guess would hit one Z of the time"
    assert value("ch2_stored_chance") < 0.3
    assert value("ch2_stored_gru") > 0.9 and value("ch2_stored_linear") > 0.9


def test_with_one_pair_the_gru_succeeds_at_every_distance(built_book) -> None:
    # "it keeps a high accuracy in every bin up to 63 positions. Distance alone does not defeat
    # it" (the accuracies its cell prints, and the figure's text alternative); also the answer of
    # exercise 9 ("near 100% at every distance").
    assert value("ch2_one_pair_gru_acc") > 0.95
    assert value("ch2_one_pair_gru_min_bin") > 0.9


def test_operation_counts_follow_table_1(built_book) -> None:
    # "attention costs X times the GRU's operations at n = 16 and Y times at n = 1024 ... They
    # cost the same at n = Z = 3d" (d = 64)
    assert value("ch2_flops_ratio_n16") < 1 < value("ch2_flops_ratio_n1024")
    assert abs(value("ch2_flops_crossover") / (3 * 64) - 1) < 0.1


def test_path_lengths_follow_table_1(built_book) -> None:
    # "one attention layer ..., plain convolutions of width 3 need X layers, dilated ones
    # Y = log2 64"
    assert value("ch2_path_attention") == 1
    assert value("ch2_path_conv") == 32
    assert value("ch2_path_dilated") == 6


# The figures' text alternatives (each drawing cell's "mystnb" metadata) state these findings.

def test_the_recall_loss_curves_show_what_their_text_alternative_says(built_book) -> None:
    """Section 5, the training curves: attention falls below 0.1 nats early and ends near zero;
    the GRU and linear mixing end in between; the dilated CNN stays at chance (log 16)."""
    assert value("ch2_attention_step_below_01") < 200  # 71 of 400 steps
    assert value("ch2_final_loss_attention") < 0.01  # 5e-5
    for name in ("ch2_final_loss_gru", "ch2_final_loss_linear"):
        assert 0.3 < value(name) < math.log(16) - 0.5, name  # 1.51, 1.62
    assert abs(value("ch2_final_loss_cnn") - math.log(16)) < 0.05  # 2.773


def test_the_gru_and_linear_mixing_stay_below_attention_at_every_distance(built_book) -> None:
    """Section 5, accuracy against distance: their best bin stays far below attention's worst."""
    best = value("ch2_others_best_bin")
    assert 1 / 16 < best < value("ch2_attention_min_bin") - 0.3  # 0.41 vs 1.0
    assert best < value("ch2_one_pair_gru_min_bin") - 0.3  # the one-pair GRU's worst bin: 1.0


def test_heads_of_the_trained_model_look_at_the_pair_asked_for(built_book) -> None:
    """Section 5, the heads' heatmap: some head puts (almost) all its weight on the asked pair."""
    assert 1 <= value("ch2_heads_on_pair") <= 4  # 3
    assert value("ch2_heads_best_on_pair") > 0.9  # 0.998
