"""Chapter 5's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Values in the comments were measured in full mode at the
time of writing (seed 0, shared 2-core CPU, one thread). Values computed from the shipped sweep
(`course_lib/data/scaling_sweep.csv.gz`) or from published numbers are deterministic; their bounds
leave room for a re-run of the sweep on another machine. Measurements of this machine (peak,
throughput, MFU) get wide bounds: they move by tens of per cent with the load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch05]

SLUG = "05-scaling-laws"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_parameter_counts(built_book: Path) -> None:
    """Section 1: "All 4 checkpoints match to the parameter. The rule of thumb misses GPT-2 small
    by -0.7%"; GPT-3's table "within 3%", "the largest difference is 1.8%", "with 5,120 the formula
    gives 12.85 billion, also within 3%"; "a GPT-2 block keeps 66.6% of its parameters in the MLP";
    embeddings "0.4% of GPT-3 but 57% of the smallest model" (section 5: "more than half")."""
    assert value("ch5_gpt2_exact") == 4
    assert -0.01 < value("ch5_gpt2_approx_error") < -0.005  # -0.0073
    assert 0.01 < value("ch5_gpt3_max_error") < 0.03  # 0.0179
    assert 12.61 < value("ch5_gpt3_13b_with_5120") < 13.0  # 12.85
    assert 0.66 < value("ch5_mlp_share_block") < 0.67  # 0.6663
    assert value("ch5_embedding_share_tiny") > 0.5  # 0.570
    assert value("ch5_embedding_share_gpt3") < 0.01  # 0.0037


def test_flop_counts(built_book: Path) -> None:
    """Section 2: the counter "agrees exactly (ratio 1.000)", "forward plus backward is 3.000
    times the forward pass", the fused path "saw 76.9% of our count" (all of it where the fused
    kernel is in the counter's table); attention "10%" of GPT-2's forward FLOPs, "14%" in a sweep
    model; GPT-2 small "189" and "285" MFLOPs per token; "2.60 PF-days" and "3,646". The
    figure's alt text: each curve is n_ctx / (12 d + n_ctx), "the narrower the model the sooner
    attention dominates"."""
    assert value("ch5_flopcounter_ratio") == 1.0
    assert value("ch5_flopcounter_train_ratio") == 3.0
    fused = value("ch5_flopcounter_fused_share")  # 0.769 on CPU: attention's 23% uncounted
    assert fused == 1.0 or 0.7 < fused < 0.85
    assert value("ch5_attention_share_gpt2") == pytest.approx(1024 / (12 * 768 + 1024))
    assert 0.13 < value("ch5_attention_share_sweep") < 0.15  # 0.143
    assert value("ch5_attention_share_sweep") == pytest.approx(64 / (12 * 32 + 64))
    assert 185 < value("ch5_gpt2_forward_mflops") < 193  # 189.0
    assert 280 < value("ch5_gpt2_exact_forward_mflops") < 290  # 284.8
    assert value("ch5_gpt3_small_pfdays") == pytest.approx(2.60, rel=0.01)  # 2.604
    assert value("ch5_gpt3_pfdays") == pytest.approx(3640, rel=0.01)  # 3646


def test_machine_measurements(built_book: Path) -> None:
    """Section 3: "the fp32 peak was 24-90 GFLOP/s on one thread", bf16 slower on this CPU; the
    sweep's largest model "an MFU of 27-33%; the wider model reached 51-61%. Larger products use
    the machine better"; GPT-3 on paper at GPT-3's published MFU (21.3%) "53 days", "526 MWh",
    "2.6 million dollars", at PaLM's (46.2%) "25 days"; this machine alone "8.1e+05 years"."""
    peak = value("ch5_peak_fp32_gflops")  # 24-100 on this CPU, one thread, by the load
    assert 5 < peak < 1e6
    assert value("ch5_tokens_per_s") > 1e3  # 10,000-44,000
    small, wide = value("ch5_mfu_small"), value("ch5_mfu_wide")  # 0.27-0.33, 0.51-0.61
    assert 0.01 < small < 1.2 and 0.01 < wide < 1.2
    assert wide > 1.1 * small
    days = value("ch5_gpt3_days_1024")  # published MFU: deterministic
    assert days == pytest.approx(3.64e3 * 8.64e19 / (312e12 * 0.213 * 1024) / 86400)  # 53.5
    assert value("ch5_gpt3_days_palm_mfu") == pytest.approx(days * 0.213 / 0.462)  # 24.7
    assert days * 1024 * 24 * 0.4 / 1000 == pytest.approx(value("ch5_gpt3_mwh"), rel=1e-6)
    assert days * 1024 * 24 * 2.0 / 1e6 == pytest.approx(value("ch5_gpt3_rental_musd"), rel=1e-6)
    assert value("ch5_gpt3_here_years") > 1e3  # 4e5-8e5


def test_published_allocations(built_book: Path) -> None:
    """Section 4: approach 3 as published "N_opt ~ C^0.45"; Chinchilla's Table 3 grows N "as C to
    the power 0.50", Kaplan's as C^0.73, "at 1e25 FLOPs Kaplan asks for 23 times the
    parameters"; at GPT-3's compute "517 billion" (Kaplan) against "50 billion" (Table 3), GPT-3
    trained on "1.7 tokens per parameter", between the two ("part of the way"); Llama 3 8B "1,875
    tokens per parameter" and "9 times smaller than Chinchilla's optimum for its compute"."""
    assert value("ch5_chinchilla_a3_exponent") == pytest.approx(0.28 / 0.62)
    assert value("ch5_table3_exponent") == pytest.approx(0.50, abs=0.01)  # 0.498
    assert value("ch5_kaplan_over_table3_1e25") == pytest.approx(23, abs=1)  # 22.99
    kaplan, table3 = value("ch5_kaplan_n_gpt3"), value("ch5_table3_n_gpt3")  # 517, 50
    assert kaplan == pytest.approx(517, abs=1) and table3 == pytest.approx(50, abs=1)
    assert table3 < 175 < kaplan
    assert value("ch5_tokens_per_param_gpt3") == pytest.approx(300 / 175)
    assert value("ch5_tokens_per_param_llama") == pytest.approx(15e12 / 8e9)
    assert value("ch5_llama_undersize") == pytest.approx(9.5, abs=0.1)  # 9.47


def test_the_sweep_and_its_live_rerun(built_book: Path) -> None:
    """Section 5: "32 runs over 8 sizes spanning 2.1 decades of N; its training took 23
    minutes"; "the training text has 4.3 million characters and the longest runs see 4.3 times
    as many, about four epochs" (section 6: "about 4 times"); "the 3 smallest sizes have a single
    layer"; the frontier's exponent "-0.057 ... which it happens to resemble" (Kaplan's -0.050);
    "Re-run and shipped point differ by at most 0.0000 nats (to four decimals), far less than the
    gaps between the sweep's points"."""
    assert value("ch5_sweep_runs") == 32
    assert value("ch5_sweep_sizes") == 8
    assert value("ch5_sweep_decades") >= 1.5  # 2.05
    assert 10 < value("ch5_sweep_minutes") < 60  # 22.7
    assert value("ch5_train_million_chars") == pytest.approx(4.343, abs=1e-3)
    assert 3.5 < value("ch5_sweep_max_epochs") < 4.5  # 4.32
    assert value("ch5_one_layer_sizes") == 3
    assert -0.075 < value("ch5_frontier_exponent") < -0.04  # -0.0569
    assert value("ch5_rerun_max_diff") < 0.02  # 0.0084 (the sweep's gaps: 0.03 and more)


def test_power_law_fits(built_book: Path) -> None:
    """Section 6: "alpha_N = 0.072 (90% interval 0.061 to 0.077) and alpha_D = 0.150 (0.084 to
    0.233)"; "The 2 largest models sit above the line"."""
    a_n, a_d = value("ch5_alpha_n"), value("ch5_alpha_d")
    assert 0.04 < a_n < 0.11 and value("ch5_alpha_n_lo") < a_n < value("ch5_alpha_n_hi")
    assert 0.08 < a_d < 0.25 and value("ch5_alpha_d_lo") < a_d < value("ch5_alpha_d_hi")
    assert value("ch5_undertrained_above") == 2


def test_chinchilla_approaches_on_the_sweep(built_book: Path) -> None:
    """Section 6: the surface "fits every run within 2.4% of its loss", "E = 1.50, alpha = 0.32
    and beta = 0.61", exponent "0.66"; approach 2 "a = 0.70 and b = 0.30"; "Both are close to
    Kaplan et al.'s 0.73, not to Chinchilla's 0.5"; "414 characters per parameter, not
    Chinchilla's 20"; total parameters "lowers the exponent to 0.65: part of the way". The
    approach-2 figure's alt text: N* grows "closer to Kaplan's slope than to Chinchilla's"."""
    assert value("ch5_fit_rmse") < 0.04  # 0.0236
    assert 1.0 < value("ch5_fit_E") < 2.0  # 1.495
    assert 0.1 < value("ch5_fit_alpha") < 1.0 and 0.1 < value("ch5_fit_beta") < 1.2
    a2, a3 = value("ch5_a_approach2"), value("ch5_a_approach3")  # 0.70, 0.66
    assert 0.6 < a2 < 0.85 and 0.6 < a3 < 0.85
    assert abs(a2 - 0.73) < abs(a2 - 0.5) and abs(a3 - 0.73) < abs(a3 - 0.5)
    assert value("ch5_b_approach2") == pytest.approx(1 - a2, abs=1e-6)
    assert value("ch5_tokens_per_param_mid") > 100  # 414
    assert 0.5 < value("ch5_a_approach2_total") < a2  # 0.653


def test_extrapolation_to_the_held_out_run(built_book: Path) -> None:
    """Section 7: approach 3 "predicted 1.821 ... measured 1.780, an error of +0.041 nats
    (2.3%)"; "The frontier's power law in C alone errs by -0.068" (more); the main figure's alt
    text: the held-out run "lies a little above the extended line" (the line predicts less)."""
    assert value("ch5_heldout_rel_error") < 0.05  # 0.023
    assert abs(value("ch5_heldout_predicted") - value("ch5_heldout_measured")) == pytest.approx(
        abs(value("ch5_heldout_error")))
    assert abs(value("ch5_heldout_frontier_error")) > abs(value("ch5_heldout_error"))
    assert -0.15 < value("ch5_heldout_frontier_error") < 0  # -0.068


def test_published_laws(built_book: Path) -> None:
    """Section 4: approach 3 predicts "1.937 nats per token for Chinchilla and 1.993 for Gopher:
    the smaller model on more data is better"; its optimum at 5.76e23 FLOPs "32 billion parameters
    on 3.0 trillion tokens" (not Table 3's 67B / 1.5T); Kaplan's L(C) "1.76" at GPT-3's compute."""
    assert value("ch5_loss_chinchilla") == pytest.approx(1.937, abs=1e-3)
    assert value("ch5_loss_gopher") == pytest.approx(1.993, abs=1e-3)
    assert value("ch5_loss_chinchilla") < value("ch5_loss_gopher")
    assert value("ch5_opt_n_gopher_budget") == pytest.approx(32.2, abs=0.2)
    assert value("ch5_opt_d_gopher_budget") == pytest.approx(2.98, abs=0.02)
    assert value("ch5_opt_n_gopher_budget") < 60  # far from Table 3's 67 billion
    assert value("ch5_kaplan_loss_gpt3") == pytest.approx(1.76, abs=0.01)


def test_memory_of_training_state(built_book: Path) -> None:
    """Section 8: "Float32 AdamW keeps 16 bytes a parameter"; GPT-3's state "2,794 GB", ZeRO-1
    "700 GB" (the whole model's 16-bit weights and gradients stay), ZeRO-3 "2.7 GB", tensor
    parallelism over 1,024 GPUs "3.2 GB"; 7.5 billion on 64 GPUs under ZeRO-1 "31.4 GB", ZeRO's
    Figure 1."""
    assert value("ch5_fp32_adam_bytes_per_param") == 16
    ddp, zero1 = value("ch5_gpt3_state_gb_ddp"), value("ch5_gpt3_state_gb_zero1")
    assert ddp == pytest.approx(16 * 174_604_259_328 / 1e9)  # 2794
    assert zero1 == pytest.approx(700.5, abs=0.1) and zero1 > 80  # no GPU holds it
    assert value("ch5_gpt3_state_gb_zero3") == pytest.approx(2.73, abs=0.01)
    assert value("ch5_gpt3_state_gb_tensor") == pytest.approx(3.24, abs=0.01)
    assert value("ch5_zero1_75b_gb") == pytest.approx(31.4, abs=0.01)


def test_the_chapter_fits_its_time_budget(built_book: Path) -> None:
    """Title: "about N seconds on a 2-core CPU (full mode)" (glued); the budget is 60 s (120 s on a
    busy machine of that kind)."""
    assert value("ch5_seconds") < 120
