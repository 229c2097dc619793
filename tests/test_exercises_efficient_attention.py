"""Chapter 6's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 6 as for every chapter, that the instructor's
solutions pass the visible and hidden tests, that the visible tests catch every slip and that
calling course_lib (this chapter's or chapter 2's attention, private helpers included) fails.
Here: the two exercises whose statement bounds their memory fail a quadratic implementation that
gets the output right, and the references agree with independent peers.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import grading, linear_attention, sparse_attention
from course_lib.exercises import efficient_attention as ex6
from tests.conftest import run_visible_tests, solution

pytestmark = pytest.mark.ch06
SLUG = "06-efficient-attention"


# The stated algorithm is graded ---------------------------------------------------------------

def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def quadratic_causal_linear_attention(q, k, v):
    """The right output through the T x T similarities: what the statement forbids."""
    a = (_phi(q) @ _phi(k).transpose(-2, -1)).tril()
    return (a @ v) / a.sum(-1, keepdim=True)


def full_scores_tile_attention(q, kv_blocks):
    """The right output and log-sum-exp from all T_q x T_k scores at once."""
    ks, vs = zip(*kv_blocks)
    k, v = torch.cat(ks, dim=-2), torch.cat(vs, dim=-2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize("name,fn", [("causal_linear_attention", quadratic_causal_linear_attention),
                                     ("query_tile_attention", full_scores_tile_attention)])
def test_a_quadratic_implementation_with_the_right_output_fails(name: str, fn) -> None:
    results = grading.evaluate(f"efficient_attention.{name}", fn)
    failed = [r for r in results if r.message]
    assert failed and (name == "query_tile_attention"  # only blocks arrive: any gathering fails
                       or all("memory bound" in r.name for r in failed)), [r.name for r in failed]
    assert any("memory bound" in r.name for r in failed)
    assert all("built a tensor of" in r.message for r in failed)
    with pytest.raises(AssertionError, match="you built a tensor of"):
        run_visible_tests(SLUG, name, fn)


@pytest.mark.parametrize("name", ["causal_linear_attention", "query_tile_attention"])
def test_the_memory_bound_leaves_a_wide_margin(name: str) -> None:
    """On the bounded case the solution stays far below the bound, the quadratic form far above."""
    ex = ex6.EXERCISES[f"efficient_attention.{name}"]
    case = next(c for c in ex.cases() if "memory bound" in c.name)
    inputs = case.inputs()
    bound = ex.largest_tensor(inputs)
    with grading.AllocationMeter() as meter:
        ex.run(solution(SLUG, name), inputs)
    assert meter.largest * 2 <= bound
    quadratic = {"causal_linear_attention": quadratic_causal_linear_attention,
                 "query_tile_attention": full_scores_tile_attention}[name]
    with grading.AllocationMeter() as meter:
        ex.run(quadratic, inputs)
    assert meter.largest >= 5 * bound


# References against independent peers ---------------------------------------------------------

def test_layers_to_connect_reference_measures_the_closed_form() -> None:
    """The measured reference equals ceil((n - 1) / (w r)), 1 or 2 with global tokens, None when
    dilation never reaches."""
    for n in range(2, 40):
        for w in range(0, 4):
            for r in (1, 2, 3):
                hops = w * r
                if (n - 1) % r == 0 and n - 1 <= hops:
                    want: int | None = 1
                elif hops == 0 or (n - 1) % r:
                    want = None
                else:
                    want = math.ceil((n - 1) / hops)
                assert ex6.layers_to_connect(n, w, r) == want, (n, w, r)
                assert ex6._layers(n, w, r) == want, (n, w, r)
                for globals_ in ([0], [n - 1], [n // 2], [1, n - 2]):
                    assert (ex6._layers(n, w, r, globals_)
                            == ex6.layers_to_connect(n, w, r, globals_)), (n, w, r, globals_)
    assert ex6.layers_to_connect(33, 2) == 16
    assert ex6.layers_to_connect(30, 1, 1, [12]) == 2
    assert ex6.layers_to_connect(30, 1, 1, [0]) == 1
    # beyond the measured sizes the reference is the closed form, in exact Python ints
    n = 3 * 10 ** 17 + 2
    assert ex6.layers_to_connect(n, 3) == 10 ** 17 + 1
    assert ex6.layers_to_connect(n, 1, 2) is None


def test_positive_random_features_are_unbiased_and_positive() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 5, generator=g, dtype=torch.float64).mul(0.4).unbind(0)
    w = torch.randn(400_000, 5, generator=g, dtype=torch.float64)
    estimate = (linear_attention.positive_random_features(x, w)
                * linear_attention.positive_random_features(y, w)).sum()
    assert abs(estimate.item() / math.exp(x @ y) - 1) < 0.02
    fourier = (linear_attention.trigonometric_random_features(x, w)
               * linear_attention.trigonometric_random_features(y, w)).sum()
    assert abs(fourier.item() / math.exp(x @ y) - 1) < 0.05
    assert bool((linear_attention.positive_random_features(5 * x, w[:100]) > 0).all())


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
    out, lse = ex6.query_tile_attention(q, zip(k.split(4, dim=-2), v.split(4, dim=-2)))
    s = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)


def test_the_key_value_stream_is_drawn_block_by_block_and_read_once() -> None:
    """The adapter's stream: blocks of the stated sizes, the same for one seed, a generator (a
    second pass sees nothing), never all the keys at once."""
    from course_lib.exercises._calls import key_value_stream

    inputs = {"q": torch.zeros(2, 3, 4, dtype=torch.float64), "seed": 5, "n_keys": 10, "d_v": 3,
              "block_size": 4, "scale": 1.0}

    def twice(q, kv_blocks):
        first = [(k.shape, v.shape, k.dtype) for k, v in kv_blocks]
        return first, list(kv_blocks)

    first, second = key_value_stream(twice, inputs)
    assert [tuple(s[0]) for s in first] == [(2, 4, 4), (2, 4, 4), (2, 2, 4)]
    assert [tuple(s[1]) for s in first] == [(2, 4, 3), (2, 4, 3), (2, 2, 3)]
    assert all(s[2] == torch.float64 for s in first) and second == []
    keys = key_value_stream(lambda q, kv_blocks: torch.cat([k for k, _ in kv_blocks], -2), inputs)
    again = key_value_stream(lambda q, kv_blocks: torch.cat([k for k, _ in kv_blocks], -2), inputs)
    assert torch.equal(keys, again)
    with grading.AllocationMeter() as meter:
        key_value_stream(solution(SLUG, "query_tile_attention"),
                         {**inputs, "n_keys": 4096, "block_size": 64})
    assert meter.largest <= 2 * 3 * 64 * 4


def test_a_two_pass_solution_that_keeps_the_blocks_fails_the_probe_budget() -> None:
    """Keeping every block to read them twice (a list, no tensor larger than a block, so the
    notebook's meter passes it) holds the whole stream: far beyond the probe's budget."""
    probe = ex6.EXERCISES["efficient_attention.query_tile_attention"].memory_probe
    inputs = probe.inputs()
    stream_bytes = inputs["n_keys"] * (inputs["q"].shape[-1] + inputs["d_v"]) * 8
    keys_bytes = inputs["n_keys"] * inputs["q"].shape[-1] * 8
    assert keys_bytes >= 2 * probe.budget_bytes and stream_bytes >= 4 * probe.budget_bytes


def test_sliding_window_reference_is_the_band_of_width_two_w_plus_one() -> None:
    mask = ex6.sliding_window_mask(12, 2)
    assert mask.sum(-1).tolist() == [3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 4, 3]
    assert torch.equal(ex6.sliding_window_mask(12, 2, causal=True), mask.tril())


def test_the_performer_demo_features_are_the_exercise_reference() -> None:
    """The chapter's experiment uses the graded reference, so what it measures is what is graded."""
    ex = ex6.EXERCISES["efficient_attention.positive_random_features"]
    assert ex.reference is linear_attention.positive_random_features
    x, w = torch.zeros(1, 3), torch.randn(9, 3)
    torch.testing.assert_close(ex.reference(x, w), torch.full((1, 9), 1 / 3))
    assert F.relu is not None  # torch.nn.functional is the only other import the slips use


def test_no_stub_or_visible_test_gives_a_derivation_away() -> None:
    """Issue 30: the stub of positive_random_features does not print the feature map, and the
    visible test of layers_to_connect does not say how far a layer moves information or why a
    dilated window never connects."""
    from tests.conftest import release_notebook, visible_tests
    release = release_notebook(SLUG).read_text(encoding="utf-8")
    assert "|x|^2" not in release and "exp(x @ w.T" not in release
    layers = visible_tests(SLUG, "layers_to_connect")
    for hint in ("per layer", "moves information", "positions apart", "odd", "hops"):
        assert hint not in layers, hint
