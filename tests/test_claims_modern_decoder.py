"""Chapter 7's measured sentences, asserted from the executed book's glued values.

Each test names the sentence it guards. Thresholds leave a margin that another seed or a busier
machine still meets (values measured in full mode at the time of writing, seed 0, on a shared
2-core CPU, in the comments). The ladder's numbers (sections 1, 6 and 8) are read from the
shipped runs (``course_lib/data/modern_decoder_runs.json.xz``) and fixed by that file; the rest
is measured by the chapter itself. Times are CPU times of one thread (``time.process_time``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import glued, glued_float

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book"), pytest.mark.ch07]

SLUG = "07-modern-decoder"


def value(name: str) -> float:
    return glued_float(SLUG, name)


def test_rope_scores_depend_on_the_offset_and_the_pairings_agree(built_book: Path) -> None:
    """Section 1: "shifting both positions by 1000 changes RoPE's scores by at most X
    (rounding), and the sinusoids-added scores by Y"; "the interleaved scores and the half-split
    scores of the permuted features differ by Z: one model, two layouts"; after exercise 2, "the
    half-split model then gives the interleaved model's logits to C, while the same checkpoint
    loaded as it is runs without any error and its logits differ by up to U"."""
    assert value("ch7_shift_diff") < 1e-9  # 1e-13
    assert value("ch7_added_shift_diff") > 1.0  # 20
    assert value("ch7_pairing_diff") < 1e-12  # 0 or rounding
    assert value("ch7_converted_diff") < 1e-12  # 5e-15
    assert value("ch7_unconverted_diff") > 0.5  # 6.6


def test_past_the_trained_context(built_book: Path) -> None:
    """Section 1: "at the trained context the RoPE models reach X, against Y with learned
    positions and Z with added sinusoids"; "past it every model gets worse ... RoPE, still the
    lowest, although RoPE loses the most against its own loss at 128 characters and the
    sinusoids the least"; "position interpolation without fine-tuning makes RoPE worse"."""
    loss = {(s, c): value(f"ch7_len_{s}_{c}") for s in ("learned", "sinusoidal", "rope")
            for c in (128, 256, 512)}  # rope 1.991, 2.080, 2.288; learned 2.391, 2.512, 2.567
    assert loss["rope", 128] < loss["learned", 128] - 0.2 < loss["sinusoidal", 128]  # sin 2.444
    for s in ("learned", "sinusoidal", "rope"):
        assert loss[s, 128] < loss[s, 256] < loss[s, 512], s
    assert loss["rope", 512] < min(loss["learned", 512], loss["sinusoidal", 512])
    rise = {s: loss[s, 512] - loss[s, 128] for s in ("learned", "sinusoidal", "rope")}
    assert rise["rope"] > rise["learned"] > rise["sinusoidal"]  # 0.30, 0.18, 0.07
    assert value("ch7_len_pi_256") > loss["rope", 256] + 0.2  # 2.66
    assert value("ch7_len_pi_512") > loss["rope", 512] + 0.2  # 3.20


def test_rmsnorm_equals_layernorm_on_centred_inputs_and_its_time(built_book: Path) -> None:
    """Section 2: "on centred inputs RMSNorm and LayerNorm agree to X"; "the fused RMSNorm takes
    R of LayerNorm's time, so here its saving of one reduction does not show" (section 8: "no
    faster on this CPU")."""
    assert value("ch7_rms_ln_diff") < 1e-12
    assert 0.9 < value("ch7_rms_time_ratio") < 20  # 1.19, 2.65 on the loaded machine


def test_swiglu_width_keeps_the_parameters(built_book: Path) -> None:
    """Section 3: "d = 4096 gives a SwiGLU width of 11008, and the MLP then has 1.0078 times the
    parameters of the GELU MLP it replaces"."""
    assert value("ch7_swiglu_width") == 11008
    assert value("ch7_swiglu_param_ratio") == pytest.approx(3 * 11008 / (8 * 4096))


def test_llama3_cache_budget_and_the_small_models_cache(built_book: Path) -> None:
    """Section 4: "per token, Llama 3 8B caches 131072 bytes (128 KiB): at 8,192 tokens 1 GiB, at
    131,072 tokens 16 GiB, more than the 15 GiB of its weights in bf16; with one key/value head per
    query head 64 GiB"; "the small model's cache holds X bytes ... and the formula says X"."""
    assert value("ch7_llama3_bytes_per_token") == 131_072
    assert value("ch7_llama3_8k_bytes") == 2 ** 30
    assert value("ch7_llama3_128k_bytes") == 16 * 2 ** 30
    assert value("ch7_llama3_128k_gib") == 16
    assert value("ch7_llama3_128k_mha_gib") == 64
    assert value("ch7_llama3_weights_gib") < value("ch7_llama3_128k_gib")
    assert value("ch7_small_cache_bytes") == value("ch7_small_cache_formula") == 28_416


def test_rolling_cache_is_constant_and_the_reach_is_exact(built_book: Path) -> None:
    """Section 5: "without a window the cache grows ... to X bytes after 64; with a window of 16
    it reaches Y bytes at the 16th token and stays there"; "changing any of the 14 tokens before
    the last changes its logits (by at least Z); changing a token further back changes them by
    0, exactly nothing"."""
    assert value("ch7_full_cache_end") == 32_768  # 2 layers x 2 heads x 16 x 64 x 2 x 4 bytes
    assert value("ch7_window_cache_at_16") == value("ch7_window_cache_end") == 8_192
    assert value("ch7_reach") == 14
    assert value("ch7_influence_inside_min") > 1e-6  # 0.13
    assert value("ch7_influence_beyond_max") == 0.0


def test_experts_with_and_without_the_balancing_loss(built_book: Path) -> None:
    """Section 6: "without the balancing loss ... the most used expert of a layer takes X ...
    and with a capacity factor of 1 Y would be dropped. With the loss ... X' and Y'"; "the
    language-model loss hardly differs"; "MLPs hold T parameters and a token uses A, about what the
    dense rung's MLPs hold"."""
    assert value("ch7_moe_max_share_unbalanced") > value("ch7_moe_max_share_balanced") + 0.1
    assert value("ch7_moe_max_share_balanced") < 0.3  # 0.279; even would be 0.25
    assert value("ch7_moe_dropped_unbalanced") > 3 * value("ch7_moe_dropped_balanced")  # 24%, 4%
    assert abs(value("ch7_moe_loss_balanced") - value("ch7_moe_loss_unbalanced")) < 0.01
    assert value("ch7_moe_total") == 147_968 and value("ch7_moe_active") == 74_240
    assert abs(value("ch7_moe_active") / value("ch7_dense_mlp_params") - 1) < 0.02


def test_speculative_decoding(built_book: Path) -> None:
    """Section 7: the acceptance rates measured against the predicted alpha, tokens per target
    pass against the formula, the speed-ups, and the greedy output equal to the target's."""
    names = ("unigram", "bigram", "trigram")
    alpha = [value(f"ch7_spec_{n}_alpha") for n in names]  # 0.29, 0.51, 0.69
    accept = [value(f"ch7_spec_{n}_acceptance") for n in names]
    assert alpha[0] < alpha[1] < alpha[2] and accept[0] < accept[1] < accept[2]
    for n in names:
        assert abs(value(f"ch7_spec_{n}_acceptance") - value(f"ch7_spec_{n}_alpha")) < 0.1
        assert value(f"ch7_spec_{n}_per_pass") == pytest.approx(
            value(f"ch7_spec_{n}_predicted_per_pass"), rel=0.15)
    assert value("ch7_spec_trigram_per_pass") > 2.2  # 2.70
    for n in names:  # "the prediction lies above the measurement for every draft"
        assert 0 < value(f"ch7_spec_{n}_cost_ratio") < 0.5  # 0.05, 0.07, 0.08
        assert value(f"ch7_spec_{n}_predicted_speedup") > value(f"ch7_spec_{n}_speedup")
        assert value(f"ch7_spec_{n}_predicted_speedup") < 1.5 * value(f"ch7_spec_{n}_speedup")
    assert value("ch7_spec_trigram_speedup") > 1.3  # 1.78 (CPU time)
    assert value("ch7_spec_unigram_speedup") < value("ch7_spec_trigram_speedup")
    assert glued(SLUG)["ch7_spec_greedy_equal"] == "True"


def test_the_ladder(built_book: Path) -> None:
    """Section 8: "after 600 steps rotary positions make by far the largest difference"; "over the
    last 100 steps the learned-position rung still fell by X, the RoPE rung by Y" (and, in the
    papers' section, "the learned-position rung was still falling faster"); "RMSNorm changes nothing
    the seeds can tell apart"; "SwiGLU at equal parameters lowers the loss"; "grouped-query
    attention ... costs a little ... about three standard deviations of the seeds above SwiGLU's
    rung"; the rungs' parameters within 0.4%; the run times between min and max."""
    m = {n: value(f"ch7_ladder_{n}") for n in ("gpt", "rope", "rmsnorm", "swiglu", "gqa")}
    sd = {n: value(f"ch7_ladder_{n}_std") for n in m}
    assert value("ch7_ladder_seeds") == 3
    assert m["gpt"] - m["rope"] > 0.3  # 2.391 -> 1.991
    assert value("ch7_ladder_gpt_last_drop") > value("ch7_ladder_rope_last_drop") > 0.01
    gains = [m["gpt"] - m["rope"], m["rope"] - m["rmsnorm"], m["rmsnorm"] - m["swiglu"],
             m["swiglu"] - m["gqa"]]
    assert gains[0] == max(gains) and gains[0] > 3 * max(abs(g) for g in gains[1:])
    assert abs(m["rmsnorm"] - m["rope"]) < max(sd["rmsnorm"], sd["rope"])  # 0.008 < 0.019
    assert m["rmsnorm"] - m["swiglu"] > 0.05  # 0.095
    assert 0 < m["gqa"] - m["swiglu"] < 0.03  # 0.011
    assert 2 * sd["gqa"] < m["gqa"] - m["swiglu"] < 4 * sd["gqa"]
    params = [value(f"ch7_ladder_{n}_params") for n in m]
    assert max(params) / min(params) < 1.004
    assert value("ch7_ladder_seconds_min") < value("ch7_ladder_seconds_max")


def test_the_chapter_runs_within_its_budget(built_book: Path) -> None:
    """Title: "about 30 seconds on a 2-core CPU, more on a busy machine"."""
    # The 60 s budget itself is measured by bench/chapter_times.py (AUTHORING.md rule 9), not
    # asserted here: machines of this kind differ by up to 2x, and the book build shares the
    # cores with the other tests. This guards the title's order of magnitude.
    assert value("ch7_seconds") < 120
