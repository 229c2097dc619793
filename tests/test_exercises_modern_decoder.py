"""Chapter 7's exercises: the references agree with independent peers (the rotation matrix,
torch's grouped-query attention, Llama's cache budget, the measured ladder).

That the instructor's solutions pass, the slips fail with their own messages and calling
course_lib fails is checked for every chapter in tests/test_exercises.py and
tests/test_exercise_registries.py."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import llama
from course_lib.exercises import modern_decoder as ex7
from tests.questions import answer

pytestmark = pytest.mark.ch07


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
