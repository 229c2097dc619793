"""Chapter 2's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 2 as for every chapter, that the notebook's nine
exercises are the registry's, that its solutions pass, that the visible tests catch the slips and
that calling course_lib's implementation fails with the reference-call message (its table holds
this chapter's calls too); the questions are checked with every chapter's in
tests/test_questions.py. Here: other torch-only ways to solve an exercise pass too (the hidden
tests grade the result, not the method), and what a student reads on mistakes no slip lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib import grading
from course_lib.exercises import self_attention as ex2
from tests.conftest import load, run_visible_tests, setup_namespace, source_notebook
from tests.questions import answer

pytestmark = pytest.mark.ch02

SLUG = "02-self-attention"


def _failures(name: str, fn: Callable[..., Any]) -> str:
    results = grading.evaluate(f"self_attention.{name}", fn, answer(f"self_attention.{name}"))
    return grading.format_failures(f"self_attention.{name}", results) or ""


# ---- other correct ways pass: the hidden tests grade the result, not the method ---------------

def _sdpa_by_loops(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    e = (scores - top).exp()
    weights = e / e.sum(-1, keepdim=True).clamp(min=1e-300)
    return weights @ value, weights


def _step_with_torch_sdpa(x, w_q, w_k, w_v, cache_k, cache_v):
    k = torch.cat([cache_k, (x @ w_k.T)[:, None]], 1)
    v = torch.cat([cache_v, (x @ w_v.T)[:, None]], 1)
    y = F.scaled_dot_product_attention((x @ w_q.T)[:, None], k, v)  # torch is allowed
    return y[:, 0], k, v


def _mha_per_head_loop(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    d_head = w_q.shape[0] // n_heads
    outs, weights = [], []
    for i in range(n_heads):
        rows = slice(i * d_head, (i + 1) * d_head)  # head i's rows of each (out, in) weight
        q, k, v = query @ w_q[rows].T, key @ w_k[rows].T, value @ w_v[rows].T
        shape = (query.shape[0], n_heads, query.shape[1], key.shape[1])
        m = None if mask is None else torch.broadcast_to(mask, shape)[:, i]
        out, w = _sdpa_by_loops(q, k, v, m)
        outs.append(out)
        weights.append(w)
    return torch.cat(outs, -1) @ w_o.T, torch.stack(weights, 1)


@pytest.mark.parametrize("name, fn", [
    ("scaled_dot_product_attention", _sdpa_by_loops),
    ("cached_attention_step", _step_with_torch_sdpa),
    ("multi_head_attention", _mha_per_head_loop),
])
def test_another_torch_only_solution_passes(name: str, fn: Callable[..., Any]) -> None:
    assert _failures(name, fn) == ""


def test_torch_sdpa_is_allowed_but_gives_no_weights() -> None:
    def fused(query, key, value, mask=None):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), None

    message = _failures("scaled_dot_product_attention", fused)
    assert "calls course_lib" not in message
    assert "return a tuple (output, weights) of two tensors" in message


# ---- what a student reads --------------------------------------------------------------------

def test_a_leaked_mask_that_is_no_listed_slip_is_diagnosed() -> None:
    def half_masked(query, key, value, mask=None):
        out, weights = _sdpa_by_loops(query, key, value)
        if mask is not None:  # masks after the softmax: rows no longer sum to one
            weights = weights * (0.5 + 0.5 * mask)
        return weights @ value, weights

    message = _failures("scaled_dot_product_attention", half_masked)
    assert "masked position (query" in message and "must get exactly zero weight" in message


def test_messages_do_not_reveal_the_inputs() -> None:
    message = _failures("cached_attention_step", ex2._step_not_itself)
    case = ex2.EXERCISES["self_attention.cached_attention_step"].cases()[0]
    first_value = f"{float(case.inputs()['x'].flatten()[0]):.6g}"
    assert first_value not in message


def test_a_transposed_weight_fails_on_square_weights_with_its_message() -> None:
    message = _failures("multi_head_attention", ex2._mha_x_at_w)
    assert "applied as x @ w.T (nn.Linear's convention); you applied x @ w" in message
    assert "your function raised" in message  # non-square cases: the shapes do not fit


# ---- the exercises that ask for something the page does not give -----------------------------

def _statement(name: str) -> str:
    """The markdown cell just before exercise ``name``'s solution cell in the source notebook."""
    cells = load(source_notebook(SLUG)).cells
    (i,) = [i for i, c in enumerate(cells)
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == name]
    assert cells[i - 1].cell_type == "markdown"
    return "".join(cells[i - 1].source)


def test_every_statement_ends_with_what_the_student_may_use() -> None:
    for name in ex2.EXERCISES:
        last = _statement(name.split(".", 1)[1]).strip().splitlines()[-1]
        assert last.startswith("**You may use:** torch"), (name, last)


def test_a_variance_estimated_from_samples_passes_the_visible_test_only() -> None:
    def sampled(d_k, var_q=1.0, var_k=1.0, mean_q=0.0, mean_k=0.0):
        g = torch.Generator().manual_seed(1)
        qs = mean_q + var_q ** 0.5 * torch.randn(400_000, d_k, generator=g, dtype=torch.float64)
        ks = mean_k + var_k ** 0.5 * torch.randn(400_000, d_k, generator=g, dtype=torch.float64)
        return (qs * ks).sum(-1).var().item()

    run_visible_tests(SLUG, "score_variance", sampled)
    assert "got" in _failures("score_variance", lambda **kw: sampled(**{**kw, "d_k": 1})
                              * kw["d_k"])


def test_another_form_of_the_variance_passes() -> None:
    def expanded(d_k, var_q=1.0, var_k=1.0, mean_q=0.0, mean_k=0.0):
        return d_k * (var_q * var_k + var_q * mean_k ** 2 + mean_q ** 2 * var_k)

    assert _failures("score_variance", expanded) == ""


def test_the_variance_is_a_number_numpy_scalars_included_not_a_tensor() -> None:
    """The statement asks for a number, not a tensor (it no longer says "a Python float")."""
    def expanded(d_k, var_q=1.0, var_k=1.0, mean_q=0.0, mean_k=0.0):
        return d_k * (var_q * var_k + var_q * mean_k ** 2 + mean_q ** 2 * var_k)

    def as_float32(*args, **kwargs):
        return np.float32(expanded(*args, **kwargs))

    def as_tensor(*args, **kwargs):
        return torch.tensor(expanded(*args, **kwargs), dtype=torch.float64)

    statement = _statement("score_variance")
    assert "Python `float`" not in statement and "a number (not a tensor)" in statement
    run_visible_tests(SLUG, "score_variance", as_float32)
    assert _failures("score_variance", as_float32) == ""
    with pytest.raises(AssertionError, match="return a number, not a tensor"):
        run_visible_tests(SLUG, "score_variance", as_tensor)
    assert "expected a number" in _failures("score_variance", as_tensor)


def _given_cache_step() -> Callable[..., Any]:
    """The code the statement of exercise 3 gives, run on top of the setup cell."""
    text = _statement("cached_attention_step")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = setup_namespace(SLUG)
    exec(compile(code, "<statement of cached_attention_step>", "exec"), namespace)
    return namespace["cached_attention_step"]


def test_the_given_cache_step_has_the_bug_the_statement_promises() -> None:
    given = _given_cache_step()
    with pytest.raises(AssertionError, match="differs from causal attention"):
        run_visible_tests(SLUG, "cached_attention_step", given)
    message = _failures("cached_attention_step", given)
    assert "check over which keys and values it attends" in message
    # runs and returns the right shapes, as the statement says
    y, k, v = given(torch.randn(2, 6), torch.randn(4, 6), torch.randn(4, 6), torch.randn(3, 6),
                    torch.zeros(2, 0, 4), torch.zeros(2, 0, 3))
    assert (y.shape, k.shape, v.shape) == ((2, 3), (2, 1, 4), (2, 1, 3))


def test_the_relative_map_statement_and_stub_do_not_give_the_matrix() -> None:
    text = _statement("relative_position_map")
    assert "eq-rotation" not in text and "sin \\omega s" not in text
    cells = load(source_notebook(SLUG)).cells
    before = "".join("".join(c.source) for c in cells[:[
        i for i, c in enumerate(cells)
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "relative_position_map"
    ][0]])
    assert "(eq-rotation)" not in before and "relative_position_map(" not in before.replace(
        "`relative_position_map(shift", "")


def test_nn_multihead_attention_is_allowed_but_does_not_fit_every_shape() -> None:
    def with_torch_layer(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
        d = w_q.shape[0]
        layer = torch.nn.MultiheadAttention(d, n_heads, bias=False, kdim=key.shape[-1],
                                            vdim=value.shape[-1], batch_first=True,
                                            dtype=query.dtype)
        with torch.no_grad():
            layer.q_proj_weight.copy_(w_q)
            layer.k_proj_weight.copy_(w_k)
            layer.v_proj_weight.copy_(w_v)
            layer.out_proj.weight.copy_(w_o)
            B, T_q, T_k = query.shape[0], query.shape[1], key.shape[1]
            allowed = (torch.ones(B, n_heads, T_q, T_k, dtype=torch.bool) if mask is None
                       else torch.broadcast_to(mask, (B, n_heads, T_q, T_k)))
            out, w = layer(query, key, value, attn_mask=~allowed.reshape(B * n_heads, T_q, T_k),
                           average_attn_weights=False)
        return out.nan_to_num(0.0), w.nan_to_num(0.0)

    results = grading.evaluate("self_attention.multi_head_attention", with_torch_layer)
    assert any(r.message is None for r in results)          # allowed: not a reference call
    assert any(r.message is not None for r in results)      # a non-square query projection
    assert not any(r.reference_called for r in results)


def test_a_count_computed_in_float64_fails_the_long_context() -> None:
    def in_floats(T):
        return int(T * (T + 1) / 2), int(T * (T + 1) * (2 * T + 1) / 6)

    message = _failures("kv_cache_cost", in_floats)
    assert "a context too long for float64 to count exactly" in message
    assert "(a long context)" not in message  # float64 still counts T <= 10^5 exactly


def test_the_longest_context_is_beyond_any_loop_over_the_steps() -> None:
    # "a loop over the steps cannot finish within the grader's 60 seconds per cell": even at
    # 10^8 steps a second a loop needs 10^6 s for T = 10^14; the closed forms take microseconds.
    cases = ex2.EXERCISES["self_attention.kv_cache_cost"].cases()
    longest = max(case.inputs()["T"] for case in cases)
    assert 10 ** 14 <= longest <= 10 ** 15
    assert ex2.kv_cache_cost(longest)[1] > 2 ** 64  # exact Python ints, beyond int64
