"""Chapter 2's exercises: what the generic registry and notebook tests cannot know.

Solutions come from the source notebook (``tests.conftest.solution``), never copies: they pass
every hidden case; other torch-only ways to solve an exercise pass too; calling course_lib's
implementation fails with the reference-call message. The questions are checked with every
chapter's in tests/test_questions.py.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from course_lib import attention, grading, multihead, positional
from course_lib.exercises import self_attention as ex2
from tests.conftest import solution
from tests.questions import answer

pytestmark = pytest.mark.ch02

SLUG = "02-self-attention"
NAMES = [ex.name for ex in ex2.EXERCISES.values()]
QUESTIONS = [ex.name for ex in ex2.EXERCISES.values() if isinstance(ex, grading.Question)]


def _failures(name: str, fn: Callable[..., Any]) -> str:
    results = grading.evaluate(f"self_attention.{name}", fn, answer(f"self_attention.{name}"))
    return grading.format_failures(f"self_attention.{name}", results) or ""


def test_the_chapter_has_its_eight_exercises_in_notebook_order() -> None:
    assert NAMES == ["scaled_dot_product_attention", "cached_attention_step", "kv_cache_cost",
                     "multi_head_attention", "sinusoidal_encoding", "relative_position_map",
                     "pe_similarity", "predict_one_pair"]
    assert QUESTIONS == ["kv_cache_cost", "pe_similarity", "predict_one_pair"]


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_solution_passes_every_hidden_case(name: str) -> None:
    fn = solution(SLUG, name)
    assert _failures(name, fn) == ""


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


# ---- calling course_lib's implementation fails with the reference-call message ----------------

def _calls_attention(query, key, value, mask=None):
    return attention.scaled_dot_product_attention(query, key, value, mask, return_weights=True)


def _calls_masked_softmax(query, key, value, mask=None):
    weights = attention.masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]),
                                       mask)
    return weights @ value, weights


def _step_calls_attention(x, w_q, w_k, w_v, cache_k, cache_v):
    k = torch.cat([cache_k, (x @ w_k.T)[:, None]], 1)
    v = torch.cat([cache_v, (x @ w_v.T)[:, None]], 1)
    return attention.scaled_dot_product_attention((x @ w_q.T)[:, None], k, v)[:, 0], k, v


def _step_calls_step(x, w_q, w_k, w_v, cache_k, cache_v):
    return attention.cached_attention_step(x, w_q, w_k, w_v, cache_k, cache_v)


def _calls_module(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return multihead.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _calls_split_heads(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    multihead.split_heads(query @ w_q.T, n_heads)
    return _mha_per_head_loop(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _calls_positional_module(n_positions, d_model, dtype=torch.float32):
    pos = positional.SinusoidalPositionalEncoding(d_model, max_len=n_positions)
    return pos(torch.zeros(1, n_positions, d_model, dtype=dtype))[0]


def _map_calls_encoding(shift, d_model, dtype=torch.float32):
    positional.sinusoidal_encoding(2, d_model)
    return ex2._rotation(shift, d_model, dtype, upper=1.0, lower=-1.0)


@pytest.mark.parametrize("name, fn, which", [
    ("scaled_dot_product_attention", _calls_attention, "scaled_dot_product_attention"),
    ("scaled_dot_product_attention", _calls_masked_softmax, "scaled_dot_product_attention"),
    ("cached_attention_step", _step_calls_attention, "scaled_dot_product_attention"),
    ("cached_attention_step", _step_calls_step, "cached_attention_step"),
    ("multi_head_attention", _calls_module, "multi_head_attention"),
    ("multi_head_attention", _calls_split_heads, "multi_head_attention"),
    ("sinusoidal_encoding", _calls_positional_module, "sinusoidal_encoding"),
    ("relative_position_map", _map_calls_encoding, "sinusoidal_encoding"),
])
def test_calling_course_lib_fails_with_the_reference_call_message(
        name: str, fn: Callable[..., Any], which: str) -> None:
    with pytest.raises(grading.ReferenceCallError,
                       match=f"calls course_lib's implementation of 'self_attention.{which}'"):
        grading.check(f"self_attention.{name}", fn)
