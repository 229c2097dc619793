"""Chapter 1's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Thresholds leave a margin that another seed or machine
still meets (measured values in full mode, at the time of writing, in the comments).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import glued, glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch01]

SLUG = "01-seq2seq"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_an_untrained_model_sits_near_the_uniform_loss(built_book: Path) -> None:
    """Section 2: "An untrained model sits near the uniform loss ... against log V"."""
    assert abs(value("ch1_untrained_loss") - value("ch1_log_v")) < 0.15  # 2.736 vs 2.708


def test_the_counter_rnn_states_collide_after_differing_first(built_book: Path) -> None:
    """Section 3: "The final states are equal ... the states after the first letter differ"."""
    assert value("ch1_collision_final_gap") == 0.0
    assert value("ch1_collision_first_gap") == 1.0


def test_greedy_and_beam_mostly_agree_and_the_beam_wins_where_they_differ(
        built_book: Path) -> None:
    """Section 4: agree on X of N dates; where they differ, the beam is more probable in Y of Z."""
    n, agree = value("ch1_beam_n"), value("ch1_beam_agree")
    differ, higher = value("ch1_beam_differ"), value("ch1_beam_higher")
    assert agree + differ == n and 0 <= higher <= differ
    assert agree >= 0.5 * n  # 73 of 100 in a 200-date run of this model: 147 of 200
    assert higher >= 0.8 * differ  # every one of them so far


def test_two_beams_lose_to_greedy_on_the_hand_checked_model(built_book: Path) -> None:
    """Section 4: "Greedy's output has probability 0.140, two beams 0.105, three beams 0.140"."""
    assert math.isclose(value("ch1_lose_greedy_p"), 0.14, rel_tol=1e-9)
    assert math.isclose(value("ch1_lose_beam2_p"), 0.105, rel_tol=1e-9)
    assert math.isclose(value("ch1_lose_beam3_p"), 0.14, rel_tol=1e-9)


def test_a_gaussian_kernel_over_keys_of_one_norm_is_a_dot_product(built_book: Path) -> None:
    """Section 5: same norm: agree to rounding; random norms: they do not."""
    assert value("ch1_bridge_gap_same_norm") < 1e-5  # 7e-8 (float32)
    assert value("ch1_bridge_gap_random_norms") > 0.02  # 0.078


def test_attention_costs_training_time(built_book: Path) -> None:
    """Section 7: "training costs more than without attention (A s against B s)"."""
    assert value("ch1_train_seconds_attention") > value("ch1_train_seconds_no_attention")


def test_chapter_1_reaches_its_accuracy_claims(built_book: Path) -> None:
    """The table of "What the paper found": dates, with and without attention."""
    with_attention, without = value("ch1_acc_attention"), value("ch1_acc_no_attention")
    assert with_attention >= 0.95, f"attention model: {with_attention:.3f} exact match"  # 0.992
    assert with_attention > without + 0.3  # 0.296


def test_uniform_attention_collapses_but_keeps_the_format(built_book: Path) -> None:
    """Section 7: made uniform, exact match falls to X, far below even the model without
    attention, although Y of its outputs are well-formed dates."""
    uniform = value("ch1_acc_uniform")
    assert uniform < 0.05 and uniform < 0.5 * value("ch1_acc_no_attention")  # 0.001 vs 0.296
    assert value("ch1_uniform_well_formed") >= 0.5


def test_accuracy_falls_with_length_without_attention_and_stays_flat_with_it(
        built_book: Path) -> None:
    """"What the paper found": without attention exact match falls from X on 4-6 words to Y on
    12-14; with attention it stays nearly flat (Z and W)."""
    short_no, long_no = value("ch1_short_no_attention"), value("ch1_long_no_attention")
    short_att, long_att = value("ch1_short_attention"), value("ch1_long_attention")
    assert short_no - long_no >= 0.5  # 0.83 -> 0.004
    assert long_att >= 0.85  # 0.96
    assert abs(short_att - long_att) <= 0.1
    assert long_att > long_no + 0.5


def test_the_run_time_is_glued(built_book: Path) -> None:
    """The title cites the build's run time."""
    assert 0 < value("ch1_seconds") < 600
    assert set(glued(SLUG)) >= {"ch1_seconds", "ch1_acc_attention", "ch1_acc_uniform"}


# The figures' text alternatives (each drawing cell's "mystnb" metadata) state these findings.

def test_the_loss_figures_show_what_their_text_alternatives_say(built_book: Path) -> None:
    """Sections 3, 7 and 8, the loss curves: without attention the date loss ends far below
    log V; with attention it ends far below the loss without, on dates and on reordering."""
    no_attention = value("ch1_final_loss_no_attention")
    assert no_attention < value("ch1_log_v") / 3  # 0.25 vs 2.71
    assert value("ch1_final_loss_attention") < no_attention / 5  # 0.0063
    # 0.007, 0.63
    assert value("ch1_reorder_loss_attention") < value("ch1_reorder_loss_no_attention") / 5


def test_the_middle_kernel_width_is_closest_to_the_true_function(built_book: Path) -> None:
    """Section 5, the kernel regression figure: h = 0.3 has the lowest root-mean-square error."""
    middle = value("ch1_nw_rmse_middle")
    assert middle < value("ch1_nw_rmse_narrow")  # 0.18 vs 0.26
    assert middle < value("ch1_nw_rmse_wide")  # 0.60


def test_each_query_weights_the_keys_near_it(built_book: Path) -> None:
    """Section 5, the kernel weights: a diagonal band, every row's weight mostly within 2h."""
    assert value("ch1_nw_weight_within_2h") > 0.8  # 0.91, the worst of ten rows


def test_the_date_heatmap_reads_the_year_and_the_day(built_book: Path) -> None:
    """Section 7, one date's attention: the year rows read the year, the day rows the day."""
    assert value("ch1_date_year_share") > 0.7  # 0.99
    assert value("ch1_date_day_share") > 0.7  # 0.94


def test_the_reordering_heatmap_follows_the_diagonal(built_book: Path) -> None:
    """Section 8, one sentence's attention: the strongest source word of (almost) every row is
    within one position of the row's own."""
    assert value("ch1_reorder_near_diagonal") >= 0.8  # 1.0
