"""Chapter 2's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 2 as for every chapter, that the notebook's eight
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

import pytest
import torch
import torch.nn.functional as F

from course_lib import grading
from course_lib.exercises import self_attention as ex2
from tests.questions import answer

pytestmark = pytest.mark.ch02


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
