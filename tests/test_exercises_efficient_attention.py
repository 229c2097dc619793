"""Chapter 6's graded exercises: the instructor's solutions pass, the references agree with
independent peers, and calling course_lib fails."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import entmax, grading, linear_attention, sparse_attention, tiled_attention
from course_lib.exercises import efficient_attention as ex6
from tests.conftest import solution

pytestmark = pytest.mark.ch06

SLUG = "06-efficient-attention"
NAMES = ["sliding_window_mask", "bigbird_mask", "causal_linear_attention",
         "online_softmax_update", "query_tile_attention", "sparsemax"]


@pytest.mark.parametrize("name", NAMES)
def test_the_instructor_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"efficient_attention.{name}", solution(SLUG, name))
    assert [r.message for r in results if r.message] == []


def test_the_registry_holds_exactly_the_notebook_exercises() -> None:
    assert sorted(ex6.EXERCISES) == sorted(f"efficient_attention.{n}" for n in NAMES)


def test_bigbird_reference_equals_course_libs_random_blocks_pattern() -> None:
    """Given random_blocks' own draw as lists, the reference is the union of the three patterns."""
    n, block, window = 20, 4, 1
    random = sparse_attention.random_blocks(n, block, n_random=2, seed=3)
    layout = sparse_attention.block_layout(random, n, block)
    lists = [row.nonzero().flatten().tolist() for row in layout]
    pattern = sparse_attention.union(sparse_attention.sliding_window(window),
                                     sparse_attention.global_tokens([5]), random)
    expected = sparse_attention.dense_mask(pattern, n)
    assert torch.equal(ex6.bigbird_mask(n, window, [5], block, lists), expected)


def test_query_tile_reference_is_softmax_attention_and_its_logsumexp() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 6, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, 11, 8, generator=g, dtype=torch.float64) * 3
    v = torch.randn(2, 3, 11, 5, generator=g, dtype=torch.float64)
    out, lse = ex6.query_tile_attention(q, k, v, 4)
    s = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)


def test_sliding_window_reference_is_the_band_of_width_two_w_plus_one() -> None:
    mask = ex6.sliding_window_mask(12, 2)
    assert mask.sum(-1).tolist() == [3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 4, 3]
    assert torch.equal(ex6.sliding_window_mask(12, 2, causal=True), mask.tril())


@pytest.mark.parametrize("name,cheat", [
    ("sliding_window_mask", lambda n, window, causal=False: sparse_attention.dense_mask(
        sparse_attention.sliding_window(window, causal), n)),
    ("causal_linear_attention",
     lambda q, k, v: linear_attention.kernel_attention(q, k, v, causal=True)),
    ("online_softmax_update",
     lambda m, l, scores: tiled_attention.online_softmax_update(m, l, scores)),
    ("query_tile_attention", lambda q, k, v, block_size: tiled_attention.tiled_attention_forward(
        q, k, v, 1 / math.sqrt(q.shape[-1]), block_k=block_size)),
    ("sparsemax", lambda z: entmax.entmax(z, alpha=2.0)),
])
def test_calling_course_lib_fails_with_the_reference_message(name: str, cheat) -> None:
    results = grading.evaluate(f"efficient_attention.{name}", cheat)
    assert results and all(r.reference_called for r in results), name
    assert grading.is_reference_call(results[0].message)
