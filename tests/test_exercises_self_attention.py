"""Chapter 2's graded exercises: torch-only solutions pass, slips fail with a helpful message,
and solutions that call course_lib's implementations fail with the reference-call message."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from course_lib import attention, grading, multihead, positional
from course_lib.exercises import self_attention as ex2

pytestmark = pytest.mark.ch02


# --------------------------------------------------------------------------------------------
# Solutions a student could write: torch only (the same code as the solution notebook's cells)
# --------------------------------------------------------------------------------------------


def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = query.shape[-1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # a fully masked row: 0/0 -> 0
    return weights @ value, weights


def causal_mask(n_queries, n_keys):
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)


def split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)  # (B, h, T, d_head)


def merge_heads(x):
    B, h, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_head)  # (B, T, d)


def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def heads(x):
        B, T, d = x.shape
        return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)

    q, k, v = heads(query @ w_q), heads(key @ w_k), heads(value @ w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = weights @ v  # (B, h, T_q, d_head)
    B, h, T_q, d_head = out.shape
    return out.transpose(1, 2).reshape(B, T_q, h * d_head) @ w_o, weights


def sinusoidal_encoding(n_positions, d_model, dtype=torch.float32):
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe.to(dtype)


def relative_position_map(shift, d_model, dtype=torch.float32):
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(shift * omega), torch.sin(shift * omega)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    m[0::2, 0::2] = torch.diag(c)
    m[0::2, 1::2] = torch.diag(s)
    m[1::2, 0::2] = torch.diag(-s)
    m[1::2, 1::2] = torch.diag(c)
    return m.to(dtype)


SOLUTIONS: dict[str, Callable[..., Any]] = {
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "causal_mask": causal_mask,
    "split_heads": split_heads,
    "merge_heads": merge_heads,
    "multi_head_attention": multi_head_attention,
    "sinusoidal_encoding": sinusoidal_encoding,
    "relative_position_map": relative_position_map,
}


def _failures(name: str, fn: Callable[..., Any]) -> str:
    results = grading.evaluate(f"self_attention.{name}", fn)
    return grading.format_failures(f"self_attention.{name}", results) or ""


def test_registry_lists_the_chapter_exercises_and_points() -> None:
    assert sorted(ex2.EXERCISES) == sorted(f"self_attention.{n}" for n in SOLUTIONS)
    assert ex2.TOTAL_POINTS == 13
    forbidden = {f for ex in ex2.EXERCISES.values() for f in ex.forbidden}
    assert set(ex2._ALL_FORBIDDEN) <= forbidden


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_torch_only_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"self_attention.{name}", SOLUTIONS[name])
    assert all(r.message is None for r in results), _failures(name, SOLUTIONS[name])


def test_check_prints_success(capsys: pytest.CaptureFixture[str]) -> None:
    grading.check("self_attention.causal_mask", causal_mask)
    assert "all hidden test cases passed" in capsys.readouterr().out


# ---- slips fail with a message that says what is wrong ---------------------------------------

def _sdpa_unscaled(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def _sdpa_leaky(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1)  # forgets the mask
    return weights @ value, weights


def _sdpa_nan_rows(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # NaN for a fully masked query
    return weights @ value, weights


def _sdpa_wrong_axis(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-2)  # normalises over the queries
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


def _sdpa_naive_exp(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    e = torch.exp(scores)  # overflows for large scores
    if mask is not None:
        e = e * mask
    weights = e / e.sum(-1, keepdim=True).clamp(min=1e-30)
    return weights @ value, weights


def _causal_off_by_one(n_queries, n_keys):
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries + 1)


def _causal_square_only(n_queries, n_keys):
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril()


def _causal_int(n_queries, n_keys):
    return torch.ones(n_queries, n_keys, dtype=torch.long).tril(n_keys - n_queries)


def _split_strided(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, d // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_no_transpose(x, n_heads):
    B, T, d = x.shape
    return x.reshape(B, n_heads, T, d // n_heads)


def _merge_no_transpose(x):
    B, h, T, d_head = x.shape
    return x.reshape(B, T, h * d_head)


def _mha_no_output_projection(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    out, weights = multi_head_attention(query, key, value, w_q, w_k, w_v,
                                        torch.eye(w_o.shape[0], dtype=w_o.dtype), n_heads, mask)
    return out, weights


def _mha_scaled_by_d_model(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    scale = math.sqrt(query.shape[-1]) / math.sqrt(query.shape[-1] // n_heads)
    return multi_head_attention(query / scale, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _sin_cos_swapped(n_positions, d_model, dtype=torch.float32):
    pe = sinusoidal_encoding(n_positions, d_model, torch.float64)
    return pe.view(n_positions, -1, 2).flip(-1).reshape(n_positions, d_model).to(dtype)


def _sin_cos_blocked(n_positions, d_model, dtype=torch.float32):
    pe = sinusoidal_encoding(n_positions, d_model, torch.float64)
    return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1).to(dtype)


def _wrong_frequency(n_positions, d_model, dtype=torch.float32):
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    angles = t * 10000.0 ** (-j / d_model)  # a different frequency per column
    pe = torch.where(j.long() % 2 == 0, angles.sin(), angles.cos())
    return pe.to(dtype)


def _map_transposed(shift, d_model, dtype=torch.float32):
    return relative_position_map(shift, d_model, dtype).T.contiguous()


def _map_wrong_sign(shift, d_model, dtype=torch.float32):
    m = relative_position_map(shift, d_model, torch.float64)
    m[1::2, 0::2] *= -1  # +sin below the diagonal too: not a rotation
    return m.to(dtype)


@pytest.mark.parametrize("name, fn, fragment", [
    ("scaled_dot_product_attention", _sdpa_unscaled, "divide the scores by sqrt(d_k)"),
    ("scaled_dot_product_attention", _sdpa_leaky, "masked position (q="),
    ("scaled_dot_product_attention", _sdpa_nan_rows, "may attend to no key"),
    ("scaled_dot_product_attention", _sdpa_wrong_axis, "not one; normalise over the keys"),
    ("scaled_dot_product_attention", _sdpa_naive_exp, "contain NaN: subtract the row maximum"),
    ("causal_mask", _causal_off_by_one, "which comes after it"),
    ("causal_mask", _causal_square_only, "the queries are the last n_queries"),
    ("causal_mask", _causal_int, "must be a torch.bool tensor"),
    ("split_heads", _split_strided, "not every h-th feature"),
    ("split_heads", _split_no_transpose, "then swap the T and h axes"),
    ("merge_heads", _merge_no_transpose, "move the head axis next to the features"),
    ("multi_head_attention", _mha_no_output_projection, "multiply by w_o"),
    ("multi_head_attention", _mha_scaled_by_d_model, "attention weights of head 0 are wrong"),
    ("sinusoidal_encoding", _sin_cos_swapped, "sines go in the even columns"),
    ("sinusoidal_encoding", _sin_cos_blocked, "interleave the two"),
    ("sinusoidal_encoding", _wrong_frequency, "share the frequency"),
    ("relative_position_map", _map_transposed, "this is the transpose"),
    ("relative_position_map", _map_wrong_sign, "check the signs"),
])
def test_slip_fails_with_a_helpful_message(name: str, fn: Callable[..., Any],
                                           fragment: str) -> None:
    message = _failures(name, fn)
    assert message, f"{fn.__name__} should fail"
    assert fragment in message, message
    assert "hidden test cases failed" in message


def test_messages_do_not_reveal_the_inputs() -> None:
    message = _failures("scaled_dot_product_attention", _sdpa_leaky)
    case = ex2.EXERCISES["self_attention.scaled_dot_product_attention"].cases()[0]
    first_value = f"{float(case.inputs()['query'].flatten()[0]):.6g}"
    assert first_value not in message


def test_a_shape_error_says_expected_and_got() -> None:
    message = _failures("split_heads", lambda x, n_heads: x.view(x.shape[0], x.shape[1],
                                                                 n_heads, -1))
    assert "the head axis must come second" in message
    assert "expected shape" in message


def test_a_crash_is_reported_per_case() -> None:
    def crashes(query, key, value, mask=None):
        return query @ key.transpose(1, 2), None  # fails on 2-D inputs

    message = _failures("scaled_dot_product_attention", crashes)
    assert "your function raised" in message


# ---- calling course_lib's implementation fails with the reference-call message ----------------

def _calls_attention(query, key, value, mask=None):
    return attention.scaled_dot_product_attention(query, key, value, mask, return_weights=True)


def _calls_masked_softmax(query, key, value, mask=None):
    weights = attention.masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]),
                                       mask)
    return weights @ value, weights


def _calls_module(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    d = query.shape[-1]
    mha = multihead.MultiHeadAttention(d, n_heads, bias=False, impl="reference").to(query.dtype)
    with torch.no_grad():
        for proj, w in ((mha.q_proj, w_q), (mha.k_proj, w_k), (mha.v_proj, w_v),
                        (mha.out_proj, w_o)):
            proj.weight.copy_(w.T)
    return mha(query, key, value, mask, need_weights=True)


def _calls_split_heads_inside(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    q = multihead.split_heads(query @ w_q, n_heads)  # another exercise's reference
    return multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _calls_positional_module(n_positions, d_model, dtype=torch.float32):
    pos = positional.SinusoidalPositionalEncoding(d_model, max_len=n_positions)
    return pos(torch.zeros(1, n_positions, d_model, dtype=dtype))[0]


def _calls_encoding_in_map(shift, d_model, dtype=torch.float32):
    pe = positional.sinusoidal_encoding(abs(shift) + 2, d_model, dtype=torch.float64)
    return relative_position_map(shift, d_model, dtype) + 0 * pe.sum()


def _calls_causal_mask(n_queries, n_keys):
    return attention.causal_mask(n_queries, n_keys=n_keys)


@pytest.mark.parametrize("name, fn, which", [
    ("scaled_dot_product_attention", _calls_attention, "scaled_dot_product_attention"),
    ("scaled_dot_product_attention", _calls_masked_softmax, "scaled_dot_product_attention"),
    ("multi_head_attention", _calls_module, "multi_head_attention"),
    ("multi_head_attention", _calls_split_heads_inside, "split_heads"),
    ("sinusoidal_encoding", _calls_positional_module, "sinusoidal_encoding"),
    ("relative_position_map", _calls_encoding_in_map, "sinusoidal_encoding"),
    ("causal_mask", _calls_causal_mask, "causal_mask"),
])
def test_calling_course_lib_fails_with_the_reference_call_message(
        name: str, fn: Callable[..., Any], which: str) -> None:
    with pytest.raises(grading.ReferenceCallError,
                       match=f"calls course_lib's implementation of 'self_attention.{which}'"):
        grading.check(f"self_attention.{name}", fn)


def test_torch_sdpa_is_allowed_but_gives_no_weights() -> None:
    def fused(query, key, value, mask=None):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), None

    message = _failures("scaled_dot_product_attention", fused)
    assert "calls course_lib" not in message
    assert "return a tuple (output, weights)" in message
