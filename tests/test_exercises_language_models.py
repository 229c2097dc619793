"""Chapter 4's graded exercises: the instructor's solutions pass, the references agree with
course_lib, boundary cases are where the statement says, and calling course_lib fails."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import bpe, grading, sampling
from course_lib.exercises import language_models as ex4
from tests.conftest import solution

pytestmark = pytest.mark.ch04

SLUG = "04-language-models"
NAMES = ["pair_counts", "merge", "bpe_encode", "bits_per_byte_loss", "kv_attention_step",
         "temperature_top_k", "top_p_filter"]


@pytest.mark.parametrize("name", NAMES)
def test_the_instructor_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"language_models.{name}", solution(SLUG, name))
    assert [r.message for r in results if r.message] == []


def test_the_registry_holds_exactly_the_notebook_exercises() -> None:
    assert sorted(ex4.EXERCISES) == sorted(f"language_models.{n}" for n in NAMES)


def test_bpe_encode_reference_equals_the_tokenizer_on_a_trained_vocabulary() -> None:
    """The exercise's reference (one piece, merges as id pairs) is what Tokenizer.encode does
    inside each pre-token."""
    tok = bpe.Tokenizer.train("the theatre then thereafter; the other ether " * 30, 300)
    to_id = {token: i for i, token in tok.vocab.items()}
    merges = [(to_id[a], to_id[b]) for a, b in tok.merges]
    for piece in ["thereafter", "theatre", "ethereal", "the", "é", ""]:
        assert ex4.bpe_encode(piece, merges) == tok.encode(piece), piece


def test_top_p_boundary_cases_are_exact_boundaries_that_float32_gets_wrong() -> None:
    """The two float32 boundary cases: exact arithmetic keeps the stated count, float32 does not."""
    cases = {c.name: c.inputs() for c in ex4._top_p_cases()}
    for name, kept in [("float32, cumulative probability exactly p", 2),
                       ("float32, the most probable token has exactly p", 1)]:
        inputs = cases[name]
        out = sampling.top_p_filter(**inputs)
        assert out.isfinite().sum(-1).tolist() == [kept] * out.shape[0], name
        probs = torch.softmax(inputs["logits"], dim=-1)  # float32, no tolerance: one more token
        sorted_probs = probs.sort(dim=-1, descending=True).values
        above = sorted_probs.cumsum(-1) - sorted_probs
        assert (above < inputs["p"]).sum(-1).tolist() == [kept + 1] * out.shape[0], name


@pytest.mark.parametrize("tolerance", [1e-6, 1e-5])
def test_top_p_any_stated_tolerance_passes(tolerance: float) -> None:
    """The statement asks for a tolerance of 1e-6; the hidden cases hold no gap near it."""

    def top_p_filter(logits, p):
        if p >= 1:
            return logits
        probs = torch.softmax(logits.double(), dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < p - tolerance
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        return logits.masked_fill(~keep, float("-inf"))

    results = grading.evaluate("language_models.top_p_filter", top_p_filter)
    assert [r.message for r in results if r.message] == []


def test_kv_reference_equals_full_causal_attention() -> None:
    """A peer: torch's SDPA over the whole sequence, at the last position."""
    g = torch.Generator().manual_seed(3)
    B, T, d, h = 2, 6, 8, 2
    w_attn, b_attn = torch.randn(3 * d, d, generator=g, dtype=torch.float64), \
        torch.randn(3 * d, generator=g, dtype=torch.float64)
    w_proj, b_proj = torch.randn(d, d, generator=g, dtype=torch.float64), \
        torch.randn(d, generator=g, dtype=torch.float64)
    x = torch.randn(B, T, d, generator=g, dtype=torch.float64)
    q, k, v = (t.reshape(B, T, h, d // h).transpose(1, 2)
               for t in (x @ w_attn.T + b_attn).split(d, -1))
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = full[:, :, -1].reshape(B, d) @ w_proj.T + b_proj
    y, k_all, v_all = ex4.kv_attention_step(x[:, -1], k[:, :, :-1], v[:, :, :-1], w_attn, b_attn,
                                            w_proj, b_proj, h)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(k_all, k)
    torch.testing.assert_close(v_all, v)


def test_pair_counts_answer_in_another_form_is_a_clear_error() -> None:
    results = grading.evaluate("language_models.pair_counts", lambda ids: list(zip(ids, ids[1:])))
    assert results[0].message and "return a dict" in results[0].message


def test_bits_per_byte_with_all_one_byte_tokens_is_nats_over_ln2() -> None:
    inputs = {c.name: c.inputs() for c in ex4._bpb_cases()}["float64, a byte-level vocabulary"]
    got = ex4.EXERCISES["language_models.bits_per_byte_loss"].reference(**inputs)
    nats = torch.nn.functional.cross_entropy(inputs["logits"].flatten(0, 1),
                                             inputs["targets"].flatten())
    assert abs(got.item() - nats.item() / math.log(2)) < 1e-12


@pytest.mark.parametrize("name,cheat", [
    ("pair_counts", lambda ids: bpe.pair_counts(ids)),
    ("merge", lambda ids, pair, new_id: bpe.merge(ids, pair, new_id)),
    ("bpe_encode", lambda text, merges: bpe.Tokenizer.train(text, 256).encode(text)),
    ("temperature_top_k",
     lambda logits, temperature, k: sampling.filter_logits(logits, temperature, top_k=k)),
    ("top_p_filter", lambda logits, p: sampling.top_p_filter(logits, p)),
])
def test_calling_course_lib_fails_with_the_reference_message(name: str, cheat) -> None:
    results = grading.evaluate(f"language_models.{name}", cheat)
    assert results and all(r.reference_called for r in results), name
    assert grading.is_reference_call(results[0].message)


def test_a_cached_step_through_course_libs_gpt_is_a_reference_call() -> None:
    from course_lib import gpt

    def cheat(x, past_k, past_v, w_attn, b_attn, w_proj, b_proj, n_head):
        cache = gpt.KVCache(1)
        cache.update(0, past_k, past_v)
        return x, cache.keys[0], cache.values[0]

    results = grading.evaluate("language_models.kv_attention_step", cheat)
    assert any(r.reference_called for r in results)
