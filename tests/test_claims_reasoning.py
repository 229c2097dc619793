"""Chapter 9's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Values read from the shipped result files
(``course_lib/data/reasoning_s5.json.xz`` and ``reasoning_rl.json.xz``, made by
``scripts/train_reasoning.py``) are fixed by those files; the live ones (section 2's samples of the
shipped policy, the gradient check) are measured by the chapter itself, in full mode, seed 0, on a
shared 2-core CPU (values at the time of writing in the comments).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch09]

SLUG = "09-reasoning"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_the_chain_of_thought_tracks_the_point_and_the_controls_do_not(built_book: Path) -> None:
    """Section 1 (reasoning_s5.json.xz, means over three seeds, trained on k = 1 to 5): "every
    format is right at k = 1"; answering directly "falls to X at k = 2 and to a guess from k = 3
    on"; "the pause tokens do not help"; the chain "far above the other two" at k = 5, losing
    accuracy with every step; past the trained lengths "the chain's sixth token is never the right
    place", "no model is right more than X", the pause models at most Y."""
    assert value("ch9_s5_seeds") == 3 and value("ch9_s5_steps") == 3000
    assert value("ch9_s5_train_k") == 5 and value("ch9_s5_test_k") == 10
    for key in ("ao", "cot", "pause"):
        assert value(f"ch9_s5_{key}_k1") > 0.99  # 1.0 on every seed
    for key in ("ao", "pause"):
        assert 0.2 < value(f"ch9_s5_{key}_k2") < 0.6  # .445, .300: a part of two
        for k in (3, 4, 5):
            assert 0.15 < value(f"ch9_s5_{key}_k{k}") < 0.25  # a guess: 0.2
    cot = [value(f"ch9_s5_cot_k{k}") for k in range(1, 6)]  # 1.0, .889, .781, .734, .666
    assert all(a > b for a, b in zip(cot, cot[1:]))  # loses accuracy with every step
    assert value("ch9_s5_cot_min_k5") > 0.45  # .517: far above a guess on every seed
    assert cot[-1] - max(value("ch9_s5_ao_k5"), value("ch9_s5_pause_k5")) > 0.3
    assert value("ch9_s5_cot_k6") == 0.0
    assert value("ch9_s5_max_out") < 0.3  # answer only stays near a guess
    assert value("ch9_s5_pause_max_out") < 0.1


def test_many_samples(built_book: Path) -> None:
    """Section 2: pass@1 of the starting policy, pass@n for all n samples; the majority vote
    "barely moves" from one sample to n "while pass@k climbs"."""
    assert value("ch9_live_samples") == 32 and value("ch9_live_problems") == 64
    assert 0.2 < value("ch9_live_pass1") < 0.6  # 0.344
    assert value("ch9_live_passn") > 0.85  # 0.953
    assert abs(value("ch9_live_voten") - value("ch9_live_vote1")) < 0.15  # 0.484, 0.438
    assert value("ch9_live_passn") - value("ch9_live_pass1") > 0.3
    assert value("ch9_live_format") > 0.9  # 0.979 (glued, no longer quoted by exercise 4)


def test_the_plug_in_estimate_is_biased_low_and_the_unbiased_one_is_not(built_book: Path) -> None:
    """Section 2: the plug-in estimate "is biased low ... reaches X at p ~ Y" (n = k = 32); the
    unbiased estimator's expectation is exactly 1 - (1 - p)^k ("checked at the end of this
    section": the cell after section 2's experiment sums it over the binomial and prints the
    largest gap, glued as ch9_unbiased_gap)."""
    assert -0.3 < value("ch9_plugin_worst") < -0.1  # -0.165
    assert 0 < value("ch9_plugin_worst_p") < 0.2  # 0.04
    assert value("ch9_unbiased_gap") < 1e-12  # 1.5e-14


def test_k3_as_a_loss_gives_the_other_divergences_gradient(built_book: Path) -> None:
    """Section 5, after the ablations: used as a loss, k3's expected gradient is that of
    KL(pi_ref || pi) ("agree to rounding") and differs from KL(pi || pi_ref)'s "by up to X
    here"."""
    assert value("ch9_k3_vs_reverse") < 1e-12  # 0.0
    assert value("ch9_k3_vs_exact") > 0.05  # 0.128


def test_the_format_only_reward_leaves_accuracy_where_it_was(built_book: Path) -> None:
    """Section 3: the format reward starts and ends near 1; most groups have equal rewards;
    "pass@1 moves by less than twice its standard error" (the cell prints both with their
    standard errors); "the correctness reward moves it by several points"."""
    assert value("ch9_fmt_reward_first") > 0.95 and value("ch9_fmt_reward_last") > 0.95
    assert value("ch9_fmt_zero_groups") > 0.8  # 0.95
    gap = abs(value("ch9_fmt_pass1_after") - value("ch9_fmt_pass1_before"))  # 0.008
    assert gap < 2 * value("ch9_fmt_pass1_se")  # within noise
    assert value("ch9_rl_gain_min") > 3 * gap


def test_grpo_hacks_the_lenient_verifier(built_book: Path) -> None:
    """Section 3's run against the lenient verifier (reasoning_hacking.json.xz): the starting
    policy writes a completion without an answer in "fewer than one sample in a thousand"; the
    lenient reward rises while pass@1 falls by more than 3 points (exercise 4's answer, c); "N of
    the seeds found the gap": their share without an answer went "to nearly all" and their pass@1
    "to at most X"; "until a seed finds it ... pass@1 rises" (the best checkpoint of each seed);
    the advantage of the one rewarded sample of a group of 8 is "(1 - 1/8)/sqrt(1/8) ~ 2.47, the
    largest a group of 8 can give". The alt text's "on the others it rises and stays up"."""
    import math

    import torch

    from course_lib import rl

    assert value("ch9_hack_seeds") >= 3 and value("ch9_hack_noanswer_start") < 0.001
    assert value("ch9_hack_reward_after") > value("ch9_hack_reward_before") + 0.1
    assert value("ch9_hack_pass1_after") < value("ch9_hack_pass1_before") - 0.03
    assert value("ch9_hack_found") >= 1
    runs = rl.load_runs("hacking")["runs"].values()
    last = str(max(int(s) for s in next(iter(runs))["evals"]))
    found = [r for r in runs if r["evals"][last]["no_answer"] > 0.5]
    assert len(found) == value("ch9_hack_found")
    assert all(r["evals"][last]["no_answer"] > 0.95 for r in found)  # "nearly all"
    assert value("ch9_hack_found_pass1") < 0.02
    for r in runs:  # before finding the gap (or all along), pass@1 rises
        before_found = [e["pass1"] for e in r["evals"].values() if e["no_answer"] < 0.05]
        assert max(before_found) > r["evals"]["0"]["pass1"] + 0.03
        if r not in found:  # "rises and stays up"
            assert r["evals"][last]["pass1"] > r["evals"]["0"]["pass1"] + 0.03
    assert value("ch9_hack_peak_pass1") > value("ch9_hack_pass1_before") + 0.03
    assert value("ch9_hack_kl_found") > 10 * value("ch9_hack_kl_others")  # 7.6 against 0.22
    advantages = [float(rl.group_advantages(torch.tensor([[1.0] * j + [0.0] * (8 - j)]))[0, 0])
                  for j in range(1, 8)]
    assert max(advantages) == advantages[0] == pytest.approx((1 - 1 / 8) / math.sqrt(1 / 8))
    assert round(advantages[0], 2) == 2.47


def test_grpo_gradient_is_reinforce(built_book: Path) -> None:
    """Section 4: at ratio 1 with the policy equal to the reference the gradient is REINFORCE's."""
    assert value("ch9_reinforce_diff") < 1e-12


def test_grpo_improves_pass_at_1_over_seeds_and_sharpens(built_book: Path) -> None:
    """Section 5: pass@1 from X to Y over two seeds, the gain of every seed between A and B,
    each more than twice the largest standard error; "at large k the order flips": pass@32
    falls; the majority vote "barely moves"; the KL grows; the length stays at 2k = 12."""
    assert value("ch9_rl_seeds") >= 2 and value("ch9_rl_steps") == 120
    se = value("ch9_rl_pass1_se")  # 0.028
    assert value("ch9_rl_gain_min") > 2 * se  # 0.062 > 0.056
    assert value("ch9_rl_pass1_after") > value("ch9_rl_pass1_before") + 2 * se
    assert value("ch9_rl_topk") == 32
    assert value("ch9_rl_passk_after") < value("ch9_rl_passk_before") - 0.03  # 0.895 < 0.973
    assert abs(value("ch9_rl_vote_after") - value("ch9_rl_vote_before")) < 0.05
    assert value("ch9_rl_kl_last") > 0.05  # 0.145
    assert abs(value("ch9_rl_length_first") - 12) < 0.5
    assert abs(value("ch9_rl_length_last") - 12) < 0.5
    assert 1 < value("ch9_rl_minutes") < 10  # 3.1


def test_grpo_narrows_coverage_and_the_training_batches_do_not_show_the_gain(
        built_book: Path) -> None:
    """Section 5: the hardest problems' share of right samples "even rose a little" (by X); "N
    problems ... solved in none of 32 after training ... against M the other way"; "the share
    right in the training batches does not show the gain" (first and last ten steps)."""
    assert 0 < value("ch9_rl_hard_gain") < 0.1  # 0.039
    assert value("ch9_rl_lost") > 3 * value("ch9_rl_gained")  # 18 against 2.5
    assert value("ch9_rl_lost") >= 10
    batch_change = value("ch9_rl_batch_last") - value("ch9_rl_batch_first")  # 0.375 - 0.394
    assert batch_change < value("ch9_rl_gain_min") / 2


def test_the_ablations(built_book: Path) -> None:
    """Section 5's ablations (reasoning_ablations.json.xz, 60 steps, seeds 0 and 1): "every
    variant has raised pass@1"; "none of the three pieces changes pass@1 by more than that
    noise"; without the KL penalty the KL is larger, the entropy ends lower and pass@32 falls
    further; clipping acts on few tokens; without the standard deviation the policy moves less."""
    assert value("ch9_abl_steps") == 60
    names = ("grpo", "nokl", "noclip", "nostd")
    after = [value(f"ch9_abl_{n}") for n in names]  # .444, .458, .431, .464
    se = value("ch9_abl_se")  # 0.028
    assert all(a > value("ch9_abl_before") + se for a in after)  # from .381
    assert max(after) - min(after) < 2 * se
    assert value("ch9_abl_grpo_spread") < 2 * se
    assert value("ch9_abl_nokl_kl") > 2 * value("ch9_abl_grpo_kl")  # .56 against .16
    assert value("ch9_abl_nokl_entropy") < value("ch9_abl_grpo_entropy")  # .376 against .408
    assert value("ch9_abl_nokl_entropy") < value("ch9_abl_entropy_first")
    assert value("ch9_abl_nokl_p32") < value("ch9_abl_grpo_p32") < value("ch9_abl_before_p32")
    assert value("ch9_abl_clipped") < 0.05  # 0.024
    assert value("ch9_abl_nostd_kl") < value("ch9_abl_grpo_kl")  # .094 against .162


def test_grpo_over_training_from_five_starting_policies(built_book: Path) -> None:
    """Section 5's figure over training (reasoning_curves.json.xz: seeds 0-4, each with its own
    starting policy, 120 steps, measured every 20): "Every starting policy gains ... between A and
    B, by G on average with a standard error over the seeds of S"; "most of it comes early (by
    step 60, X)"; the level "has a larger standard error than the gain"; "the shipped one (seed
    0) is the weakest" (and is the shipped policy); pass@32 "moves little on average", the four
    stronger "never below" Y, the shipped one "loses coverage"; the entropy falls, "most of it
    on the shipped policy". The papers section quotes the gain and its standard error."""
    from course_lib import rl

    assert value("ch9_curve_seeds") == 5 and value("ch9_curve_half") == 60
    assert value("ch9_curve_shipped_difference") == 0
    assert value("ch9_curve_gain_min") > 0  # 0.016 (gains .061 .074 .055 .024 .016)
    assert value("ch9_curve_gain") > 3 * value("ch9_curve_gain_se")  # .046 +- .011
    assert value("ch9_curve_gain_half") > 0.5 * value("ch9_curve_gain")  # .042
    assert min(value("ch9_curve_pass1_start_se"), value("ch9_curve_pass1_end_se")) > \
        value("ch9_curve_gain_se")  # .054, .047
    runs = rl.load_runs("curves")["runs"]
    assert value("ch9_curve_start_min") == runs["0"]["evals"]["0"]["pass1"]  # .386 (to .684)
    assert abs(value("ch9_curve_p32_end") - value("ch9_curve_p32_start")) < 0.03  # .992 .977
    assert value("ch9_curve_others_p32_min") > 0.97  # .990
    assert value("ch9_curve_seed0_p32_end") < value("ch9_curve_seed0_p32_start") - 0.03  # .965 .910
    drop = value("ch9_curve_entropy_start") - value("ch9_curve_entropy_end")  # .314 -> .288
    assert drop > 0
    assert value("ch9_curve_seed0_entropy_drop") > 0.5 * value("ch9_curve_seeds") * drop  # .079


def test_the_student_ablations_take_under_a_minute(built_book: Path) -> None:
    """Section 5's opt-in ablation cell: 40 steps of 16 problems, each "about twice as long as a
    step of the live run" (8 problems), "well under a minute a run on one thread here, a minute or
    two for all four" (measured directly: 14.6 and 16.4 s a run, its sampling included, at a
    load average of 4.5)."""
    run = 40 * 2 * value("ch9_live_grpo_seconds")  # 0.26 s a step with 8 problems: 21 s
    assert run < 40 and 4 * run < 150


def test_the_chapter_runs_within_its_budget(built_book: Path) -> None:
    # The 60 s budget itself is measured by bench/chapter_times.py (AUTHORING.md rule 9), not
    # asserted here: machines of this kind differ by up to 2x, and the book build shares the
    # cores with the other tests. This guards the title's order of magnitude.
    assert value("ch9_seconds") < 120
