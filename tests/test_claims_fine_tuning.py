"""Chapter 8's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Thresholds leave a margin that another seed or a busier
machine still meets (values measured in full mode at the time of writing, seed 0, on a shared
2-core CPU, in the comments). Values read from the shipped result file
(``course_lib/data/fine_tuning_runs.json``) are fixed by that file; the live ones (merging, costs
per step, the LoRA rerun, distillation, DPO) are measured by the chapter itself.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import glued_float
from tests.questions import answer

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch08]

SLUG = "08-fine-tuning"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_the_base_model(built_book: Path) -> None:
    """Section 1: "a validation loss of X nats per character on four plays it never saw"; the
    GPT has N parameters."""
    assert value("ch8_base_params") == 113_600
    assert 1.70 < value("ch8_base_val_loss") < 1.73  # 1.717, the shipped weights
    assert value("ch8_base_loss_before") == pytest.approx(value("ch8_base_val_loss"), abs=1e-6)


def test_lora_trains_a_small_share_merges_exactly_and_saves_little_time(built_book: Path) -> None:
    """Section 2: "rank 4 trains X parameters, Y% of the Z ...; Adam's state shrinks from A KiB
    to B KiB"; "a step of LoRA at rank 4 takes R times the CPU time of a step of full
    fine-tuning"; merging is exact (largest difference D in float64)."""
    assert value("ch8_full_trainable") == 113_600
    assert value("ch8_lora4_trainable") == 8_192  # 2 blocks x 4 x (256 + 128 + 320 + 320)
    assert value("ch8_lora4_share") == pytest.approx(8_192 / 113_600)
    assert value("ch8_full_adam_kib") == pytest.approx(113_600 * 8 / 1024)
    assert value("ch8_lora4_adam_kib") == 64
    # 0.89 to 1.40 in five runs on the busy machine: "does not save time" allows noise around 1.
    assert 0.6 < value("ch8_lora4_time_ratio") < 3.0
    assert value("ch8_merge_diff") < 1e-10  # 4e-14


def test_full_fine_tuning_learns_most_and_everything_forgets(built_book: Path) -> None:
    """Section 2: full fine-tuning reaches X%, LoRA Y, Z, W% at ranks 1, 4, 16 ("here LoRA learns
    less, and the less the smaller its rank", with the last 100 steps' training losses); the base
    loss rises from B to F (full), ... "against 4.42 nats for a uniform guess": "LoRA at rank 16
    reads Shakespeare worse than a model that knows nothing"; "among the adapters, the larger the
    rank, the more the model learnt and the more it forgot"; full fine-tuning "learnt the most
    and forgot less than LoRA at rank 16". Values from fine_tuning_runs.json.xz (full 3e-4, LoRA
    alpha = r at 3e-3)."""
    full = value("ch8_full_accuracy")  # 0.667
    loras = {r: value(f"ch8_lora{r}_accuracy") for r in (1, 4, 16)}  # 0.110, 0.210, 0.373
    assert 0.45 < full < 0.9 and all(0.0 < a < full - 0.1 for a in loras.values())
    assert loras[1] < loras[4] < loras[16]
    final = {r: value(f"ch8_lora{r}_final_loss") for r in (1, 4, 16)}  # 1.17, 1.08, 0.97
    assert value("ch8_full_final_loss") < min(final.values()) - 0.2  # 0.50
    assert final[1] > final[4] > final[16]
    before = value("ch8_base_loss_before")  # 1.717
    losses = {r: value(f"ch8_lora{r}_base_loss") for r in (1, 4, 16)}  # 2.77, 3.41, 5.06
    full_loss = value("ch8_full_base_loss")  # 4.12
    assert all(loss > before + 0.5 for loss in [full_loss, *losses.values()])
    assert losses[16] > math.log(83)  # the uniform guess, 4.42
    assert losses[1] < losses[4] < losses[16]
    assert full_loss < losses[16]


def _frontier_runs() -> list[dict]:
    """Every run of section 2's figure: the comparison's four and the forgetting sweep's."""
    from course_lib import finetune

    runs = finetune.load_runs()
    cfg = runs["config"]
    points = [{"method": n, "lr": cfg["lr_full"] if n == "full" else cfg["lr_lora"],
               "mix_windows": 0, "accuracy": m["accuracy"], "base_loss": m["base_loss"]}
              for n, m in runs["methods"].items()]
    return points + list(finetune.load_forgetting()["runs"])


def _interpolated_accuracy(points: list[dict], method: str, base_loss: float) -> float:
    line = sorted((p["base_loss"], p["accuracy"]) for p in points
                  if p["method"] == method and not p["mix_windows"])
    for (x0, y0), (x1, y1) in zip(line, line[1:]):
        if x0 <= base_loss <= x1:
            return y0 + (base_loss - x0) / (x1 - x0) * (y1 - y0)
    raise AssertionError(f"{base_loss} is outside {method}'s line {line}")


def test_forgetting_at_matched_rates_and_along_the_trade_off(built_book: Path) -> None:
    """Section 2, "Forgetting at matched tuning": at 1e-3 full fine-tuning learns more (X against
    Y) and forgets far more (F, "twice a uniform guess", against L); at 3e-4 LoRA r=16 and r=4
    learn little and forget little; "LoRA learns less and forgets less" at matched rates. Matched
    in learning: full at 1e-4 and LoRA r=16 at 1e-3 "about the same accuracy for about the same
    forgetting"; the ranking "full with text mixed in, full, LoRA r=16, then ranks 4 and 1"; the
    remedy: a base loss of M (before B), accuracy A. Values from the shipped sweep."""
    acc = {k: value(f"ch8_fg_{k}_accuracy") for k in
           ("full_1e3", "lora16_1e3", "full_1e4", "lora16_3e4", "lora4_3e4", "full_mix",
            "lora16_mix")}
    base = {k: value(f"ch8_fg_{k}_base_loss") for k in acc}
    before, uniform = value("ch8_base_loss_before"), math.log(83)
    assert acc["full_1e3"] > acc["lora16_1e3"] + 0.1  # 0.487 against 0.310
    # exercise 5's answer, (a), as the source notebook's hidden test gives it
    assert answer("fine_tuning.predict_forgetting") == "a"
    assert base["full_1e3"] > base["lora16_1e3"] + 0.1
    assert base["full_1e3"] > 1.9 * uniform  # 9.02: "twice a uniform guess"
    assert base["lora16_1e3"] < base["full_1e3"] - 3  # 3.00
    assert acc["lora16_3e4"] < 0.15 and base["lora16_3e4"] < 2.6  # 0.080, 2.36
    assert acc["lora4_3e4"] < 0.15 and base["lora4_3e4"] < 2.6
    assert abs(acc["full_1e4"] - acc["lora16_1e3"]) < 0.06  # 0.283 against 0.310
    assert abs(base["full_1e4"] - base["lora16_1e3"]) < 0.3  # 2.85 against 3.00
    # full at its tuned rate learns more and forgets less than LoRA r=16 at its own (above)
    points = _frontier_runs()
    for p in points:  # ranks 4 and 1 lie below rank 16's line: less learnt for as much forgotten
        if p["method"] in ("LoRA r=4", "LoRA r=1") and not p["mix_windows"]:
            line = [q["base_loss"] for q in points if q["method"] == "LoRA r=16"
                    and not q["mix_windows"]]
            if min(line) <= p["base_loss"] <= max(line):
                assert p["accuracy"] < _interpolated_accuracy(points, "LoRA r=16", p["base_loss"])
    mixed = [p for p in points if p["mix_windows"]]
    assert all(m["base_loss"] < p["base_loss"] for m in mixed for p in points
               if not p["mix_windows"])  # the mixed runs forget least ...
    full_mix = next(p for p in mixed if p["method"] == "full")
    assert all(full_mix["accuracy"] > p["accuracy"] for p in points if p["method"] != "full")
    assert base["full_mix"] < before + 0.05  # 1.727 against 1.717: "forgot almost nothing"
    assert base["lora16_mix"] < before + 0.05  # 1.723: "keeps the base task as well"
    assert 0.4 < acc["full_mix"] < value("ch8_full_accuracy")  # 0.513 against 0.667
    assert acc["lora16_mix"] < value("ch8_lora16_accuracy")  # 0.347 against 0.373


def test_the_live_lora_rerun_goes_the_same_way(built_book: Path) -> None:
    """Section 2: "After N steps the rerun answers X% of the test questions, with a base-task
    loss of Y: the same direction as the longer run, earlier on the way"."""
    assert value("ch8_live_steps") == 150
    assert value("ch8_live_accuracy") <= value("ch8_lora4_accuracy")  # 0.033 against 0.210
    assert value("ch8_live_base_loss") > value("ch8_base_loss_before") + 0.5  # 3.21


def test_the_distilled_student_beats_the_same_student_on_data_alone(built_book: Path) -> None:
    """Section 3: "reaches X when distilled and Y on the data alone: a gap of G nats per
    character in the distilled student's favour"; "stays above its teacher's T"."""
    assert value("ch8_student_params") == 57_472
    assert value("ch8_kd_steps") == 250
    data, kd = value("ch8_student_data_loss"), value("ch8_student_kd_loss")  # 2.509, 2.394
    assert 2.2 < kd < data < 2.9
    assert value("ch8_kd_gap") == pytest.approx(data - kd) and value("ch8_kd_gap") > 0.03  # 0.115
    assert value("ch8_teacher_loss") < kd - 0.3  # 1.695


def test_dpo_raises_the_preferred_property_at_a_measured_kl(built_book: Path) -> None:
    """Section 4: "From N pairs, DPO raises the share of completions without an e on unseen
    prompts from X to Y, at a KL divergence of K nats per completion (0 for the reference)"."""
    assert 100 < value("ch8_dpo_pairs") < 400  # 228
    before, after = value("ch8_dpo_rate_before"), value("ch8_dpo_rate_after")  # 0.30, 0.76
    assert 0.15 < before < 0.45 and after > before + 0.2
    assert 0.3 < value("ch8_dpo_kl") < 10  # 2.9
    assert abs(value("ch8_dpo_kl_reference")) < 1e-6
    assert value("ch8_dpo_final_loss") < math.log(2) / 2  # 0.045


def test_dpo_against_the_frontier_and_its_implicit_reward_on_held_out_pairs(
        built_book: Path) -> None:
    """Section 4: "no policy reaches a share of Y with less than B nats per completion. DPO got
    there with K nats, R times that least KL"; "the gap is not [noise]"; held-out pairs: "ranks
    ... in A of the pairs (T on its training pairs)"."""
    before, after = value("ch8_dpo_rate_before"), value("ch8_dpo_rate_after")
    bound = value("ch8_frontier_kl_at_dpo")
    expected = after * math.log(after / before) + (1 - after) * math.log((1 - after) / (1 - before))
    assert bound == pytest.approx(expected, rel=1e-9)
    assert value("ch8_dpo_kl_over_bound") == pytest.approx(value("ch8_dpo_kl") / bound)
    assert value("ch8_dpo_kl_over_bound") > 2.5
    assert value("ch8_heldout_pairs") > 20
    assert value("ch8_heldout_accuracy") > 0.6
    assert value("ch8_train_pair_accuracy") > 0.6


def test_the_chapter_runs_within_its_budget(built_book: Path) -> None:
    """Title: "about 40 seconds on a 2-core CPU" (43 to 54 s measured on the busy shared machine,
    where the chapter before this edition took 42 s against 49 s for it; the budget is 60)."""
    # The 60 s budget itself is measured by bench/chapter_times.py (AUTHORING.md rule 9), not
    # asserted here: machines of this kind differ by up to 2x, and the book build shares the
    # cores with the other tests. This guards the title's order of magnitude.
    assert value("ch8_seconds") < 120
