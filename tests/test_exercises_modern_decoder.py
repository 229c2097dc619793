"""Chapter 7's graded exercises: the instructor's solutions pass, the references agree with
independent peers, the slips fail with their own messages, and calling course_lib fails."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import grading, llama, moe, rope, speculative
from course_lib.exercises import modern_decoder as ex7
from tests.conftest import solution
from tests.questions import answer

pytestmark = pytest.mark.ch07

SLUG = "07-modern-decoder"
NAMES = ["apply_rotary", "rms_norm", "grouped_query_attention", "kv_cache_bytes",
         "receptive_field", "moe_route", "speculative_accept", "ladder_prediction"]


@pytest.mark.parametrize("name", NAMES)
def test_the_instructor_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"modern_decoder.{name}", solution(SLUG, name),
                               answer(f"modern_decoder.{name}"))
    assert [r.message for r in results if r.message] == []


def test_the_registry_holds_exactly_the_notebook_exercises() -> None:
    assert sorted(ex7.EXERCISES) == sorted(f"modern_decoder.{n}" for n in NAMES)


@pytest.mark.parametrize("name,call", [
    ("apply_rotary", lambda x, positions, theta=10000.0:
        rope.apply_rope(x, positions, theta, "interleaved")),
    ("rms_norm", lambda x, weight, eps=1e-5: llama.RMSNorm(x.shape[-1], eps).to(x.dtype)(x)),
    ("moe_route", lambda router_logits, k: (*moe.route(router_logits, k),
                                            moe.load_balancing_loss(router_logits, k))),
    ("speculative_accept", speculative.accept_step),
    ("kv_cache_bytes", lambda n_layers, n_kv_heads, head_dim, seq_len, batch_size,
        bytes_per_value, window=None: llama.kv_cache_bytes(llama.LlamaConfig(
            num_hidden_layers=n_layers, num_attention_heads=n_kv_heads,
            num_key_value_heads=n_kv_heads, head_dim=head_dim, sliding_window=window),
            seq_len, batch_size, bytes_per_value)),
])
def test_calling_course_lib_fails_with_a_clear_message(name: str, call) -> None:
    results = grading.evaluate(f"modern_decoder.{name}", call)
    assert all(r.reference_called for r in results), name


def test_rotary_reference_equals_the_rotation_matrix() -> None:
    x = torch.randn(3, 6, dtype=torch.float64)
    pos = torch.tensor([0, 5, 9])
    out = ex7.apply_rotary(x, pos, theta=50.0)
    for t in range(3):
        for i in range(3):
            a = float(pos[t]) * 50.0 ** (-2 * i / 6)
            r = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                             dtype=torch.float64)
            assert torch.allclose(out[t, 2 * i:2 * i + 2], r @ x[t, 2 * i:2 * i + 2])


def test_gqa_reference_equals_torch_with_enable_gqa() -> None:
    q, k, v = torch.randn(2, 6, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)
    assert torch.allclose(ex7.grouped_query_attention(q, k, v), expected, atol=1e-6)


def test_receptive_field_reference_matches_the_measured_reach() -> None:
    assert ex7.receptive_field(2, 4) == 6  # tests/test_llama.py measures this reach


def test_kv_bytes_reference_is_llamas() -> None:
    assert ex7.kv_cache_bytes(32, 8, 128, 131072, 1, 2) == llama.kv_cache_bytes(
        llama.LLAMA3_8B, 131072)


def test_ladder_answer_is_the_largest_measured_improvement() -> None:
    runs = llama.load_runs()
    mean = {}
    for r in runs["runs"]:
        mean.setdefault(r["name"], []).append(r["val_loss"]["128"])
    rungs = runs["rungs"]
    gains = {rungs[i]: sum(mean[rungs[i - 1]]) / len(mean[rungs[i - 1]])
             - sum(mean[rungs[i]]) / len(mean[rungs[i]]) for i in range(1, len(rungs))}
    best = max(gains, key=gains.get)
    assert "abcd"[rungs.index(best) - 1] == answer("modern_decoder.ladder_prediction")
