"""Chapter 4's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 4 as for every chapter, that the instructor's
solutions pass the visible and hidden tests, that the visible tests catch every slip (a student
who self-checks sees red before grading) and that calling course_lib fails. Here: the slips the
issue named fail both; the references agree with course_lib and with peers; the statements' rules
(duplicate merges, k > V, top-p's tolerance and p = 1) are what the references do.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from course_lib import bpe, copying, gpt, grading, sampling
from course_lib.exercises import language_models as ex4
from tests.conftest import (
    cell_by_grade_id,
    run_visible_tests,
    setup_namespace,
    with_notebook_signature,
)

pytestmark = pytest.mark.ch04
SLUG = "04-language-models"


@pytest.mark.parametrize("name,fn", [
    ("bpe_encode", lambda text, merges: _encode_keep_last(text, merges)),
    ("temperature_top_k", lambda logits, temperature, k: _top_k_with_topk(logits, temperature, k)),
])
def test_the_slips_the_issue_named_fail_visible_and_hidden_tests(name: str, fn, capsys) -> None:
    """A dict that keeps a duplicated merge's last index, and top-k that lets topk fail for
    k > V, fail both the visible and the hidden tests."""
    with pytest.raises(Exception):  # noqa: B017 - whatever the slip makes the cell raise
        run_visible_tests(SLUG, name, with_notebook_signature(fn, SLUG, name))
    assert "visible tests passed" not in capsys.readouterr().out
    assert any(r.message for r in grading.evaluate(f"language_models.{name}", fn))


def _encode_keep_last(text, merges):
    rank = {tuple(pair): i for i, pair in enumerate(merges)}  # a later duplicate overwrites
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, math.inf))
        if pair not in rank:
            break
        ids = _merge(ids, pair, 256 + rank[pair])
    return ids


def _merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _top_k_with_topk(logits, temperature, k):
    scaled = logits / temperature
    kth = scaled.topk(k, dim=-1).values[..., -1:]  # raises for k > V
    return scaled.masked_fill(scaled < kth, float("-inf"))


def test_bpe_encode_may_call_the_students_own_merge() -> None:
    """The statement allows calling exercise 2's merge: the graders run the solution cells in
    notebook order, so a bpe_encode that calls it earns its points."""
    namespace = setup_namespace(SLUG)
    exec("".join(cell_by_grade_id(SLUG, "merge")["source"]), namespace)
    exec("""
def bpe_encode(text, merges):
    rank = {}
    for i, pair in enumerate(merges):
        rank.setdefault(tuple(pair), i)
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, float("inf")))
        if pair not in rank:
            return ids
        ids = merge(ids, pair, 256 + rank[pair])
    return ids
""", namespace)
    results = grading.evaluate("language_models.bpe_encode", namespace["bpe_encode"])
    assert [r.message for r in results if r.message] == []


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


@pytest.mark.parametrize("tolerance, passes", [(1e-6, True), (1e-5, False), (1e-4, False),
                                                (1e-7, False), (0.0, False)])
def test_top_p_the_stated_tolerance_passes(tolerance: float, passes: bool) -> None:
    """The statement asks for a tolerance of 1e-6: it passes; a tolerance ten times larger or
    smaller, or none, fails a hidden case (masses at p - 4e-6 and p - 5e-7 in float64, and the
    float32 boundaries)."""

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
    failed = [r.name for r in results if r.message]
    assert (failed == []) == passes, failed


def test_chunk_reference_equals_full_causal_attention() -> None:
    """A peer: torch's SDPA over the whole sequence; the reference on its last T positions after
    a cache of the first P gives the same outputs and the whole sequence's keys and values."""
    g = torch.Generator().manual_seed(3)
    B, P, T, d, h = 2, 4, 3, 8, 2
    w_attn, b_attn = torch.randn(3 * d, d, generator=g, dtype=torch.float64), \
        torch.randn(3 * d, generator=g, dtype=torch.float64)
    w_proj, b_proj = torch.randn(d, d, generator=g, dtype=torch.float64), \
        torch.randn(d, generator=g, dtype=torch.float64)
    x = torch.randn(B, P + T, d, generator=g, dtype=torch.float64)
    q, k, v = (t.reshape(B, P + T, h, d // h).transpose(1, 2)
               for t in (x @ w_attn.T + b_attn).split(d, -1))
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = full.transpose(1, 2).reshape(B, P + T, d) @ w_proj.T + b_proj
    y, k_all, v_all = ex4.cached_chunk_attention(x[:, P:], k[:, :, :P], v[:, :, :P], w_attn,
                                                 b_attn, w_proj, b_proj, h)
    torch.testing.assert_close(y, expected[:, P:], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(k_all, k)
    torch.testing.assert_close(v_all, v)


def _given_chunk_attention():
    """Exercise 7's given first version, taken from the notebook's code cell."""
    import nbformat

    from tests.conftest import release_notebook
    nb = nbformat.read(release_notebook(SLUG), as_version=4)
    (cell,) = [c for c in nb.cells
               if c.cell_type == "code" and c.source.startswith("def chunk_attention_v1(")]
    namespace = setup_namespace(SLUG)
    exec(cell.source, namespace)
    return namespace["chunk_attention_v1"]


def test_the_given_first_version_fails_only_chunks_after_a_cache(capsys) -> None:
    """Exercise 7 is a debug exercise: the given code (SDPA with is_causal=T > 1, top-left
    aligned) passes the prefill and decode cases and fails every chunk after a cache, with the
    message of the slip "square"; its visible test fails it too."""
    given = _given_chunk_attention()
    results = grading.evaluate("language_models.cached_chunk_attention", given)
    failed = [r for r in results if r.message]
    assert failed and all("chunk after a cache" in r.name for r in failed), [r.name for r in failed]
    assert {r.name for r in results if "chunk after a cache" in r.name} == {r.name for r in failed}
    assert failed[0].message.startswith("new position i is position P + i")
    with pytest.raises(AssertionError):
        run_visible_tests(SLUG, "cached_chunk_attention",
                          with_notebook_signature(given, SLUG, "cached_chunk_attention"))
    assert "visible tests passed" not in capsys.readouterr().out


def test_the_statement_of_exercise_7_does_not_name_the_bug() -> None:
    """The statement says where the given code fails (chunks), never why."""
    import nbformat

    from tests.conftest import release_notebook
    nb = nbformat.read(release_notebook(SLUG), as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    statement = nb.cells[ids.index("cached_chunk_attention") - 1].source
    for giveaway in ("is_causal", "tril", "top-left", "offset", "diagonal", "P + i"):
        assert giveaway not in statement, giveaway


def test_generation_cost_is_what_a_gpt_runs() -> None:
    """The reference's counts are the positions that enter block 0 of course_lib's GPT under
    greedy decoding, without and with the cache."""
    model = gpt.GPT(gpt.GPTConfig(vocab_size=11, block_size=32, n_layer=2, n_head=2, n_embd=8))
    prompt = torch.randint(11, (1, 5), generator=torch.Generator().manual_seed(0))
    counts = []
    for step in (model.step, model.cached_step()):
        seen: list[int] = []
        hook = model.transformer.h[0].register_forward_pre_hook(
            lambda module, args, seen=seen: seen.append(args[0].shape[1]))
        from course_lib import decoding
        decoding.greedy_decode(step, prompt, 6)
        hook.remove()
        counts.append(sum(seen))
    assert tuple(counts) == gpt.generation_cost(2, 8, 5, 6)[:2]


def test_max_copy_length_is_exact_at_the_boundary() -> None:
    assert copying.max_copy_length(3, 1, 2) == 3
    assert copying.max_copy_length(100, 32, 16) == 800
    assert copying.max_copy_length(1, 8, 257) == 0 and copying.max_copy_length(1, 8, 256) == 1


def test_top_p_exercise_reference_keeps_what_course_lib_keeps() -> None:
    """The statement's rule (a tolerance of 1e-6, p = 1 keeps everything) and course_lib's
    (the rounding error of the dtype) keep the same tokens on every hidden case."""
    for case in ex4._top_p_cases():
        if "float64 sums" in case.name or "float64 probabilities" in case.name \
                or "stated tolerance" in case.name:
            continue  # p sits within 1e-5 of p - 1e-6: course_lib's tolerance (rounding) differs
        inputs = case.inputs()
        assert torch.equal(ex4.top_p_filter(**inputs).isfinite(),
                           sampling.top_p_filter(**inputs).isfinite()), case.name


def test_a_duplicated_merge_changes_the_encoding_in_a_hidden_case() -> None:
    """The hidden case for duplicates is one where keeping the last index gives other ids."""
    (case,) = [c for c in ex4._bpe_encode_cases() if "twice" in c.name]
    inputs = case.inputs()
    assert ex4.bpe_encode(**inputs) != _encode_keep_last(**inputs)


def test_pair_counts_answer_in_another_form_is_a_clear_error() -> None:
    results = grading.evaluate("language_models.pair_counts", lambda ids: list(zip(ids, ids[1:])))
    assert results[0].message and "return a dict" in results[0].message


def test_bits_per_byte_with_all_one_byte_tokens_is_nats_over_ln2() -> None:
    inputs = {c.name: c.inputs() for c in ex4._bpb_cases()}["float64, a byte-level vocabulary"]
    got = ex4.EXERCISES["language_models.bits_per_byte_loss"].reference(**inputs)
    nats = torch.nn.functional.cross_entropy(inputs["logits"].flatten(0, 1),
                                             inputs["targets"].flatten())
    assert abs(got.item() - nats.item() / math.log(2)) < 1e-12


def test_a_cached_step_through_course_libs_gpt_is_a_reference_call() -> None:
    def cheat(x, past_k, past_v, w_attn, b_attn, w_proj, b_proj, n_head):
        cache = gpt.KVCache(1)
        cache.update(0, past_k, past_v)
        return x, cache.keys[0], cache.values[0]

    results = grading.evaluate("language_models.cached_chunk_attention", cheat)
    assert any(r.reference_called for r in results)


def test_the_copy_bound_is_not_printed_before_exercise_11() -> None:
    """Issue 30: max_copy_length says "derive"; no markdown cell before its test cell, its stub
    or its visible test states the bound, a value of it or the counting argument (the prose after
    it does)."""
    import nbformat

    from tests.conftest import release_notebook
    nb = nbformat.read(release_notebook("04-language-models"), as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    before = "".join(c.source for c in nb.cells[:ids.index("max_copy_length_test") + 1])
    for giveaway in ("\\log_2 A", "2^S", "A^n", "A**n", "256 states", "800 "):
        assert giveaway not in before, giveaway


def test_top_p_float32_arithmetic_and_an_unstable_sort_fail_hidden_cases() -> None:
    """The statement's rules (float64 probabilities and sums, equal probabilities in vocabulary
    order) are checked: each way of breaking them fails a hidden case."""
    for fn in (ex4._top_p_unstable, ex4._top_p_float32,
               lambda logits, p: ex4._top_p_float32(logits, p, sums32=False)):
        assert any(r.message for r in grading.evaluate("language_models.top_p_filter", fn))
    from course_lib.exercises._common import using_secret
    for secret in ("a", "b", "c", "d"):
        with using_secret(secret):
            for case in ex4._top_p_cases():
                if "thousands" in case.name:
                    inputs = case.inputs()
                    sums32 = "sums" in case.name  # the float32 route the case is built for
                    assert not torch.equal(
                        ex4.top_p_filter(**inputs).isfinite(),
                        ex4._top_p_float32(**inputs, sums32=sums32).isfinite()), (secret, case.name)


def test_run_tokens_is_what_encoding_gives() -> None:
    """The reference count equals encoding runs with the doubling merges (the exercise reference
    of bpe_encode) and with a tokenizer trained on a long run, which learns exactly those merges."""
    for k in range(7):
        merges = [(61, 61)] + [(255 + i, 255 + i) for i in range(1, k)] if k else []
        for n in range(150):
            assert bpe.run_tokens(n, k) == len(ex4.bpe_encode("=" * n, merges)), (n, k)
    tok = bpe.Tokenizer.train("=" * 1024, 256 + 4)
    assert tok.merges == [(b"=" * 2 ** i, b"=" * 2 ** i) for i in range(4)]
    assert [len(tok.encode("=" * n)) for n in range(1, 70)] == \
        [bpe.run_tokens(n, 4) for n in range(1, 70)]


def test_run_tokens_hidden_runs_are_too_long_to_build() -> None:
    """The statement's "work the count out" is graded: a run of the first case cannot be built."""
    case = ex4._run_tokens_cases()[0]
    assert case.inputs()["n"] >= 10 ** 15


def test_no_visible_test_states_a_derived_count() -> None:
    """Issue 30: the visible tests of the derivations check properties and trivial hand values;
    none asserts a count of the cache or a copy bound (the reviewer read "expected 6")."""
    for name in ("generation_cost", "max_copy_length"):
        source = "".join(cell_by_grade_id(SLUG, f"{name}_test")["source"])
        visible = source.split("### BEGIN HIDDEN TESTS")[0]
        compared = re.findall(r"==\s*\(?-?\d+(?!\d|\s*\*)", visible.replace("len(got) == 3", ""))
        assert "expected" not in visible and not compared, (name, compared)


def test_the_length_normalisation_argument_comes_after_the_sampling_exercises() -> None:
    """Exercise 8's answer is argued only after the exercises that follow it (the prose right
    after its measurement refers to the printed lines)."""
    import nbformat

    from tests.conftest import release_notebook
    nb = nbformat.read(release_notebook(SLUG), as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    statement = ids.index("length_normalisation") - 1  # its choices name every answer
    before = "".join(c.source for i, c in enumerate(nb.cells[:ids.index("top_p_filter_test") + 1])
                     if i != statement)
    for giveaway in ("never shorter", "never picks a shorter", "only lengthen", "longer, never"):
        assert giveaway not in before, giveaway


def test_largest_chunk_is_the_schedule_brute_forced() -> None:
    """The reference (a closed form for each chunk size's largest score matrix) equals cutting the
    prompt into chunks and taking the largest (T, P + T) matrix, for every prompt up to 40
    positions and every budget; and it is not what growing the chunk until it no longer fits
    gives."""
    for L in range(1, 41):
        largest = [max((min(s + c, L) - s) * min(s + c, L) for s in range(0, L, c))
                   for c in range(1, L + 1)]  # each chunk's (T, P + T), P = s
        for budget in range(1, L * L + 2):
            fits = [c for c in range(1, L + 1) if largest[c - 1] <= budget]
            assert ex4.largest_chunk(L, budget) == max(fits, default=0), (L, budget)
    assert ex4.largest_chunk(10, 45) == 6  # chunks of 5 need 50 scores, chunks of 6 only 40
    assert ex4._chunk_budget_slip(10, 45, "monotone") == 4
