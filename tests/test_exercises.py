"""Every chapter's exercises, checked the same way: one test per concern, one id per exercise.

The chapters come from :func:`coursebook.chapters.all_chapters` and their exercises from the
chapter's registry, so a new chapter is covered without a new test file; what differs between
chapters is data in the tables below, not code. Ids read ``<exercises>.<function>``
(``seq2seq.additive_score``) and carry the chapter's marker (``-m ch01``).

Checked elsewhere, for every chapter too: each reference passes its hidden cases, the cases are
deterministic, depend on the grading secret and cover float32, float64 and a batch of one, and
every slip fails its hidden cases with its own message (tests/test_exercise_registries.py); a
question's solution, choices and hint (tests/test_questions.py); the notebooks' template, points
and the registry holding their graded cells (tests/test_notebooks.py). What only one chapter can
know (peers, hand-computed cases, other correct solutions) is in tests/test_exercises_<stem>.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch

from course_lib import (
    arithmetic,
    attention,
    bpe,
    complexity,
    copying,
    counting,
    distill,
    dpo,
    entmax,
    finetune,
    flops,
    gpt,
    grading,
    linear_attention,
    llama,
    lora,
    moe,
    multihead,
    positional,
    rope,
    sampling,
    scaling,
    sparse_attention,
    speculative,
    tiled_attention,
)
from course_lib import transformer as tf
from course_lib.exercises import self_attention as ex2
from coursebook import notebooks
from coursebook.chapters import Chapter, all_chapters, find_chapter
from tests.conftest import run_visible_tests, solution, with_notebook_signature
from tests.questions import answer
from tests.test_exercises_self_attention import _mha_per_head_loop

CHAPTERS = all_chapters()


def _mark(chapter: Chapter) -> pytest.MarkDecorator:
    return getattr(pytest.mark, f"ch{chapter.number:02d}")


def _exercises(chapter: Chapter) -> list[grading.Exercise]:
    return list(grading.chapter_exercises(chapter.exercises).values())


def _chapter_of(exercise_id: str) -> Chapter:
    return find_chapter(exercise_id.split(".", 1)[0])


def _param(exercise_id: str, *values: Any, id: str | None = None) -> Any:  # noqa: A002
    """One id of a table keyed by exercise, with its chapter's marker."""
    return pytest.param(*values, id=id or exercise_id, marks=_mark(_chapter_of(exercise_id)))


# ---- the tables: what differs between chapters -------------------------------------------------

#: Each chapter's graded exercises in notebook order (questions too). Pinned here, so that an
#: exercise dropped from both the notebook and the registry is noticed.
NOTEBOOK_EXERCISES = {
    "01-seq2seq": ["collision_loss", "greedy_decode", "beam_search", "beam_vs_greedy",
                   "beam_cost", "masked_softmax", "additive_score", "context_vector",
                   "attention_decoder_step", "uniform_attention", "offset_attention"],
    "02-self-attention": ["score_variance", "scaled_dot_product_attention", "cached_attention_step",
                          "kv_cache_cost", "multi_head_attention", "sinusoidal_encoding",
                          "relative_position_map", "pe_similarity", "predict_one_pair"],
    "03-transformer": ["feed_forward", "layer_norm", "encoder_layer", "decoder_masks",
                       "given_reads", "decoder_layer", "ffn_share", "design_layer",
                       "no_causal_mask", "mask_tokens", "next_token_loss"],
    "04-language-models": ["pair_counts", "merge", "bpe_encode", "run_tokens",
                           "bits_per_byte_loss", "generation_cost", "cached_chunk_attention",
                           "largest_chunk", "length_normalisation", "temperature_top_k",
                           "top_p_filter", "max_copy_length"],
    "05-scaling-laws": ["param_count", "forward_flops_per_token", "training_flops", "mfu",
                        "chinchilla_loss", "compute_optimal", "allocation_prediction",
                        "isoflop_minimum", "fit_power_law", "bootstrap_interval", "zero_plan"],
    "06-efficient-attention": ["sliding_window_mask", "layers_to_connect", "bigbird_mask",
                               "causal_linear_attention", "positive_random_features",
                               "online_softmax_update", "query_tile_attention", "sparsemax"],
    "07-modern-decoder": ["apply_rotary", "to_half_split", "grouped_query_attention",
                          "kv_cache_design", "moe_route", "speculative_accept",
                          "speculative_speedup", "ladder_prediction"],
    "08-fine-tuning": ["answer_only_loss", "lora_forward", "merge_lora", "lora_trainable",
                       "predict_forgetting", "distillation_loss", "kl_frontier", "dpo_loss",
                       "implicit_rewards", "extract_answer"],
    "09-reasoning": ["majority_vote", "pass_at_k", "plug_in_bias", "verifier_prediction",
                     "group_advantages", "group_size", "rloo_advantages", "grpo_loss",
                     "kl_loss", "response_logprobs", "pass_at_k_prediction",
                     "std_ablation_prediction"],
}

#: Each chapter's questions (a letter to choose; tests/test_questions.py grades them).
QUESTIONS = {
    "01-seq2seq": ["beam_vs_greedy", "uniform_attention"],
    "02-self-attention": ["pe_similarity", "predict_one_pair"],
    "03-transformer": ["ffn_share", "no_causal_mask"],
    "04-language-models": ["length_normalisation"],
    "05-scaling-laws": ["allocation_prediction"],
    "06-efficient-attention": [],
    "07-modern-decoder": ["ladder_prediction"],
    "08-fine-tuning": ["predict_forgetting"],
    "09-reasoning": ["verifier_prediction", "pass_at_k_prediction",
                     "std_ablation_prediction"],
}

#: Slips (by index in the exercise's ``slips``) that only the hidden tests catch: the visible
#: tests are hand-checkable cases and catch every other slip before grading. A test checks that
#: each entry still passes the visible tests, so an entry goes once they catch the slip.
SLIPS_ONLY_HIDDEN_TESTS_CATCH = {
    "seq2seq.collision_loss": {0},
    "seq2seq.greedy_decode": {1, 2},
    "self_attention.cached_attention_step": {3},
    "language_models.top_p_filter": {1},  # float32 arithmetic: only a crafted p shows it
    "language_models.run_tokens": {0, 1},  # the visible tests give no count of a long run
    "language_models.generation_cost": {0, 1, 2, 3},  # the visible tests give no count
    "language_models.max_copy_length": {0, 1, 2, 3},  # the visible tests give no bound
    "language_models.largest_chunk": {0, 1, 2},  # the visible tests give no chunk size
    "transformer.feed_forward": {1},
    "transformer.layer_norm": {1},
    "transformer.decoder_masks": {3},
    "transformer.mask_tokens": {1},
    "modern_decoder.apply_rotary": {1, 4},
    "modern_decoder.to_half_split": {1},
    "scaling_laws.zero_plan": {0, 1, 2, 3, 4, 5, 6, 7},  # the visible tests give no byte count
    "modern_decoder.kv_cache_design": {1, 2, 3, 4, 5, 6, 7, 8},
    "modern_decoder.moe_route": {0, 2},
    "modern_decoder.speculative_speedup": {1},
    "fine_tuning.lora_trainable": {4, 10},
    "reasoning.majority_vote": {2},
    "reasoning.group_advantages": {2},
    "reasoning.grpo_loss": {6},
    "reasoning.kl_loss": {0, 1, 2, 3, 4},
    "reasoning.group_size": {0, 1, 2, 3},
    "reasoning.response_logprobs": {0},
}


class Raised(NamedTuple):
    """What a visible test raises on a slip when the chapter says more than "it fails"."""

    types: tuple[type[BaseException], ...]
    match: str | None = None


#: The layer exercises' visible tests compare with torch's layers on random weights. The decoder's
#: second source is padded, so even ignoring cross_mask changes the output; keys and values taken
#: from y (length 4) cannot take the (B, 4, 6) cross_mask: that attempt raises.
VISIBLE_FAILURE = {
    "transformer.encoder_layer": Raised((AssertionError,),
                                        "differs from nn.TransformerEncoderLayer"),
    "transformer.decoder_layer": Raised((AssertionError, RuntimeError),
                                        "differs from nn.TransformerDecoderLayer|size of tensor"),
}

#: Exercises whose statement promises hidden cases named for float64 and for a batch of one.
NAMED_CASES = ["fine_tuning.lora_forward", "fine_tuning.answer_only_loss",
               "fine_tuning.distillation_loss", "fine_tuning.dpo_loss",
               "fine_tuning.implicit_rewards"]


def _step_calls_attention(x, w_q, w_k, w_v, cache_k, cache_v):
    k = torch.cat([cache_k, (x @ w_k.T)[:, None]], 1)
    v = torch.cat([cache_v, (x @ w_v.T)[:, None]], 1)
    return attention.scaled_dot_product_attention((x @ w_q.T)[:, None], k, v)[:, 0], k, v


def _calls_split_heads(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    multihead.split_heads(query @ w_q.T, n_heads)  # a helper of the reference, then torch only
    return _mha_per_head_loop(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask)


def _calls_positional_module(n_positions, d_model, dtype=torch.float32):
    pos = positional.SinusoidalPositionalEncoding(d_model, max_len=n_positions)
    return pos(torch.zeros(1, n_positions, d_model, dtype=dtype))[0]


def _map_calls_encoding(shift, d_model, dtype=torch.float32):
    positional.sinusoidal_encoding(2, d_model)
    return ex2._rotation(shift, d_model, dtype, upper=1.0, lower=-1.0)


def _with_chapter2_mha(x, params, n_heads, mask, norm_first):
    mha = multihead.MultiHeadAttention(x.shape[-1], n_heads).to(x.dtype)
    return mha(x, x, x, None if mask is None else mask[:, None])[0]


def _with_course_lib_decoder_layer(y, memory, params, n_heads, self_mask, cross_mask, norm_first):
    layer = tf.DecoderLayer(y.shape[-1], n_heads, params["w_1"].shape[0]).to(y.dtype)
    return layer(y, memory)[0]


def _fit_by_loglog_slope(x, y):
    slope = complexity.loglog_slope(x.tolist(), y.tolist())
    return slope, math.exp(float(y.double().log().mean() - slope * x.double().log().mean()))


def _zero_plan_by_counting(n_params, gpu_bytes, max_gpus, optimizer):
    """ZeRO's plan from chapter 5's ``counting.training_state_bytes``, the fewest GPUs of each
    stage found by bisection (a stage's bytes per GPU only fall as GPUs are added), so that the
    hidden cases of up to 2^20 GPUs take milliseconds."""
    for stage, scheme in enumerate(["ddp", "zero1", "zero2", "zero3"]):
        def fits(n, scheme=scheme):
            return counting.training_state_bytes(n_params, n, scheme) <= gpu_bytes
        if fits(max_gpus):
            lo, hi = 1, max_gpus
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
            return stage, lo
    return None


#: Solutions that call course_lib's code for the answer (the reference, its helpers, a layer of
#: another chapter): (exercise, the solution, the reference it is caught calling or None for any).
REFERENCE_CALLS = [
    ("seq2seq.context_vector", lambda scores, values, mask=None: (
        (w := attention.masked_softmax(scores, mask)) @ values, w), "seq2seq.masked_softmax"),
    ("self_attention.scaled_dot_product_attention", lambda query, key, value, mask=None:
        attention.scaled_dot_product_attention(query, key, value, mask, return_weights=True),
     "self_attention.scaled_dot_product_attention"),
    ("self_attention.scaled_dot_product_attention", lambda query, key, value, mask=None: (
        (w := attention.masked_softmax(query @ key.transpose(-2, -1)
                                       / math.sqrt(query.shape[-1]), mask)) @ value, w),
     "self_attention.scaled_dot_product_attention"),
    ("self_attention.cached_attention_step", _step_calls_attention,
     "self_attention.scaled_dot_product_attention"),
    ("self_attention.cached_attention_step", lambda x, w_q, w_k, w_v, cache_k, cache_v:
        attention.cached_attention_step(x, w_q, w_k, w_v, cache_k, cache_v),
     "self_attention.cached_attention_step"),
    ("self_attention.multi_head_attention", lambda query, key, value, w_q, w_k, w_v, w_o, n_heads,
     mask=None: multihead.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads,
                                               mask), "self_attention.multi_head_attention"),
    ("self_attention.multi_head_attention", _calls_split_heads,
     "self_attention.multi_head_attention"),
    ("self_attention.sinusoidal_encoding", _calls_positional_module,
     "self_attention.sinusoidal_encoding"),
    ("self_attention.relative_position_map", _map_calls_encoding,
     "self_attention.sinusoidal_encoding"),
    ("transformer.encoder_layer", _with_chapter2_mha, None),
    ("transformer.decoder_layer", _with_course_lib_decoder_layer, None),
    ("language_models.pair_counts", lambda ids: bpe.pair_counts(ids), None),
    ("language_models.merge", lambda ids, pair, new_id: bpe.merge(ids, pair, new_id), None),
    ("language_models.bpe_encode",
     lambda text, merges: bpe.Tokenizer.train(text, 256).encode(text), None),
    ("language_models.run_tokens", lambda n, k: bpe.run_tokens(n, k), None),
    ("language_models.temperature_top_k",
     lambda logits, temperature, k: sampling.filter_logits(logits, temperature, top_k=k), None),
    ("language_models.top_p_filter", lambda logits, p: sampling.top_p_filter(logits, p), None),
    ("language_models.generation_cost", lambda n_layer, n_embd, prompt_len, new_tokens:
        gpt.generation_cost(n_layer, n_embd, prompt_len, new_tokens), None),
    ("language_models.max_copy_length", lambda state_floats, bits_per_float, alphabet_size:
        copying.max_copy_length(state_floats, bits_per_float, alphabet_size), None),
    ("scaling_laws.param_count", lambda d_model, n_layers, vocab_size, n_ctx, tied=True,
     biases=True: counting.gpt_param_count(d_model, n_layers, vocab_size, n_ctx, tied=tied,
                                           biases=biases), None),
    ("scaling_laws.forward_flops_per_token", lambda n_params, n_layers, n_ctx, d_model:
        flops.forward_flops_per_token(n_params, n_layers, n_ctx, d_model), None),
    ("scaling_laws.training_flops", lambda n_params, n_tokens, n_layers=0, n_ctx=0, d_model=0:
        flops.training_flops(n_params, n_tokens, n_layers, n_ctx, d_model), None),
    ("scaling_laws.mfu", lambda tokens_per_second, n_params, peak_flops:
        flops.mfu(tokens_per_second, 6 * n_params, peak_flops), None),
    ("scaling_laws.fit_power_law", lambda x, y: scaling.fit_power_law(x, y), None),
    ("scaling_laws.fit_power_law", _fit_by_loglog_slope, None),
    ("scaling_laws.isoflop_minimum", lambda n_params, loss, sigma: (
        scaling.isoflop_minimum(1.0, n_params, loss).n_opt,
        scaling.isoflop_minimum(1.0, n_params, loss).loss, 0.0), None),
    ("scaling_laws.bootstrap_interval", lambda x, y, indices, level=0.9:
        scaling.bootstrap_interval(x, y, indices, level), None),
    ("scaling_laws.zero_plan", _zero_plan_by_counting, None),
    ("scaling_laws.chinchilla_loss", lambda n_params, n_tokens, E, A, B, alpha, beta:
        scaling.chinchilla_loss(n_params, n_tokens, E, A, B, alpha, beta), None),
    ("scaling_laws.compute_optimal", lambda flops, A, B, alpha, beta:
        scaling.compute_optimal(flops, 0.0, A, B, alpha, beta), None),
    ("efficient_attention.sliding_window_mask", lambda n, window, causal=False:
        sparse_attention.dense_mask(sparse_attention.sliding_window(window, causal), n), None),
    ("efficient_attention.layers_to_connect", lambda n, window, dilation=1, global_tokens=():
        sparse_attention.layers_to_connect(sparse_attention.dense_mask(sparse_attention.union(
            sparse_attention.dilated_window(window, dilation),
            sparse_attention.global_tokens(list(global_tokens))), min(n, 512))),  # no 10^11 mask
     None),
    ("efficient_attention.causal_linear_attention",
     lambda q, k, v: linear_attention.kernel_attention(q, k, v, causal=True), None),
    ("efficient_attention.positive_random_features",
     lambda x, w: linear_attention.positive_random_features(x, w), None),
    ("efficient_attention.online_softmax_update",
     lambda m, l, scores: tiled_attention.online_softmax_update(m, l, scores),  # noqa: E741
     None),
    ("efficient_attention.query_tile_attention", lambda q, kv_blocks: (lambda k, v:  # gathered
        tiled_attention.tiled_attention_forward(q, k, v, 1 / math.sqrt(q.shape[-1])))(
            *(torch.cat(t, dim=-2) for t in zip(*kv_blocks))), None),
    ("efficient_attention.query_tile_attention", lambda q, kv_blocks: (lambda k, v: (
        attention.scaled_dot_product_attention(q, k, v),
        torch.logsumexp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)))(
            *(torch.cat(t, dim=-2) for t in zip(*kv_blocks))), None),
    ("efficient_attention.sparsemax", lambda z: entmax.entmax(z, alpha=2.0), None),
    ("efficient_attention.sparsemax", lambda z: entmax._sparsemax_forward(z), None),
    ("modern_decoder.apply_rotary", lambda x, positions, theta=10000.0:
        rope.apply_rope(x, positions, theta, "interleaved"), None),
    ("modern_decoder.to_half_split", lambda w, n_heads: rope.interleaved_to_half_weight(
        w, n_heads), None),
    ("modern_decoder.grouped_query_attention", lambda q, k, v, q_pos, k_pos, window=None:
        torch.nn.functional.scaled_dot_product_attention(
            q, llama.repeat_kv(k, q.shape[1] // k.shape[1]),
            llama.repeat_kv(v, q.shape[1] // k.shape[1]),
            attn_mask=llama.attention_mask(q_pos, k_pos, window)), None),
    ("modern_decoder.moe_route", lambda router_logits, k: (
        *moe.route(router_logits, k), moe.load_balancing_loss(router_logits, k)), None),
    ("modern_decoder.speculative_accept", speculative.accept_step, None),
    ("modern_decoder.kv_cache_design", lambda budget_bytes, context, n_layers, n_heads, head_dim,
     batch_size, bytes_per_value: llama.kv_cache_design(budget_bytes, context, n_layers, n_heads,
                                                        head_dim, batch_size, bytes_per_value),
     None),
    ("modern_decoder.speculative_speedup", lambda alpha, k, cost_ratio: (
        speculative.expected_tokens_per_round(alpha, k),
        speculative.expected_speedup(alpha, k, cost_ratio)), None),
    ("fine_tuning.answer_only_loss", lambda logits, targets, answer_mask:
        finetune.answer_only_loss(logits, targets, answer_mask), None),
    ("fine_tuning.lora_forward", lambda x, weight, bias, lora_a, lora_b, alpha:
        lora.lora_forward(x, weight, bias, lora_a, lora_b, alpha), None),
    ("fine_tuning.merge_lora", lambda weight, lora_a, lora_b, alpha:
        lora.merge_lora(weight, lora_a, lora_b, alpha), None),
    ("fine_tuning.distillation_loss", lambda student_logits, teacher_logits, temperature:
        distill.distillation_loss(student_logits, teacher_logits, temperature), None),
    ("fine_tuning.dpo_loss", lambda policy_chosen, policy_rejected, reference_chosen,
     reference_rejected, beta: dpo.dpo_loss(policy_chosen, policy_rejected, reference_chosen,
                                            reference_rejected, beta), None),
    ("fine_tuning.extract_answer", lambda text: arithmetic.extract_answer(text), None),
    ("fine_tuning.lora_trainable", lambda budget, n_layer, n_embd, n_head, n_kv_head: (
        budget // lora.gpt_lora_parameters(n_layer, n_embd, 1, n_head, n_kv_head),
        lora.gpt_lora_parameters(n_layer, n_embd, max(1, budget // lora.gpt_lora_parameters(
            n_layer, n_embd, 1, n_head, n_kv_head)), n_head, n_kv_head)), None),
    ("fine_tuning.kl_frontier", lambda reference_probs, rewards, betas:
        dpo.kl_regularised_optimum(reference_probs, rewards, betas), None),
    ("fine_tuning.implicit_rewards", lambda policy_chosen, policy_rejected, reference_chosen,
     reference_rejected, beta: dpo.dpo_pair_weights(policy_chosen, policy_rejected,
                                                    reference_chosen, reference_rejected, beta),
     None),
]


# ---- the parametrisations ----------------------------------------------------------------------

CHAPTER_PARAMS = [pytest.param(ch, id=ch.slug, marks=_mark(ch)) for ch in CHAPTERS]
EXERCISE_PARAMS = [pytest.param(ch, ex, id=ex.id, marks=_mark(ch))
                   for ch in CHAPTERS for ex in _exercises(ch)]
SLIP_PARAMS = [pytest.param(ch, ex, k, id=f"{ex.id}-{k}", marks=_mark(ch))
               for ch in CHAPTERS for ex in _exercises(ch) for k in range(len(ex.slips))
               if k not in SLIPS_ONLY_HIDDEN_TESTS_CATCH.get(ex.id, ())]
HIDDEN_ONLY_PARAMS = [pytest.param(ch, ex, k, id=f"{ex.id}-{k}", marks=_mark(ch))
                      for ch in CHAPTERS for ex in _exercises(ch) for k in range(len(ex.slips))
                      if k in SLIPS_ONLY_HIDDEN_TESTS_CATCH.get(ex.id, ())]


def _counted(exercise_ids: list[str]) -> list[Any]:
    """Ids of a table with several rows per exercise: ``id``, ``id-1``, ``id-2``, ..."""
    seen: dict[str, int] = {}
    ids = []
    for exercise_id in exercise_ids:
        seen[exercise_id] = seen.get(exercise_id, -1) + 1
        ids.append(exercise_id if not seen[exercise_id] else f"{exercise_id}-{seen[exercise_id]}")
    return ids


# ---- the notebook and the registry hold the same exercises -------------------------------------

def _notebook_exercises(chapter: Chapter) -> list[str]:
    """The grade ids of the release's solution cells, in notebook order."""
    return [notebooks.nbgrader(c)["grade_id"] for c in notebooks.read(chapter.release).cells
            if notebooks.nbgrader(c).get("solution")]


@pytest.mark.parametrize("chapter", CHAPTER_PARAMS)
def test_the_registry_holds_exactly_the_notebooks_exercises(chapter: Chapter) -> None:
    assert chapter.slug in NOTEBOOK_EXERCISES, \
        f"{chapter.slug}: add its exercises and questions to the tables of {__name__}"
    names = NOTEBOOK_EXERCISES[chapter.slug]
    assert _notebook_exercises(chapter) == names
    exercises = _exercises(chapter)
    assert sorted(ex.id for ex in exercises) == sorted(f"{chapter.exercises}.{n}" for n in names)
    assert [ex.name for ex in exercises if isinstance(ex, grading.Question)] == \
        [n for n in names if n in QUESTIONS[chapter.slug]]
    assert set(QUESTIONS[chapter.slug]) <= set(names)


@pytest.mark.parametrize("chapter", CHAPTER_PARAMS)
def test_the_registry_follows_the_notebooks_order(chapter: Chapter) -> None:
    assert [ex.name for ex in _exercises(chapter)] == _notebook_exercises(chapter)


# ---- the instructor's solution passes ----------------------------------------------------------

@pytest.mark.parametrize("chapter, ex", EXERCISE_PARAMS)
def test_the_instructor_solution_passes_the_visible_and_hidden_tests(
        chapter: Chapter, ex: grading.Exercise, capsys: pytest.CaptureFixture[str]) -> None:
    """The solution cell, run on the setup cell only (as graders run it), passes the visible
    tests of the release and every hidden case (a question's: tests/test_questions.py)."""
    fn = solution(chapter.slug, ex.name)
    run_visible_tests(chapter.slug, ex.name, fn)
    assert "visible tests passed" in capsys.readouterr().out
    if not isinstance(ex, grading.Question):
        results = grading.evaluate(ex.id, fn, answer(ex.id))
        assert [r.message for r in results if r.message] == []
        assert grading.format_failures(ex.id, results) is None


# ---- the visible tests catch the slips --------------------------------------------------------

@pytest.mark.parametrize("chapter, ex, k", SLIP_PARAMS)
def test_the_visible_tests_catch_each_slip(chapter: Chapter, ex: grading.Exercise, k: int,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A student who self-checks sees red before grading: the release's test cell fails on the
    slip (not as a blank exercise) and never says the visible tests passed."""
    slip = ex.slips[k]
    fn = with_notebook_signature(slip.fn, chapter.slug, ex.name)
    expected = VISIBLE_FAILURE.get(ex.id, Raised((Exception,)))
    with pytest.raises(expected.types, match=expected.match) as err:
        run_visible_tests(chapter.slug, ex.name, fn)
    assert not isinstance(err.value, NotImplementedError)
    assert "visible tests passed" not in capsys.readouterr().out


@pytest.mark.parametrize("chapter, ex, k", HIDDEN_ONLY_PARAMS)
def test_the_slips_of_the_table_pass_the_visible_tests_and_fail_the_hidden_ones(
        chapter: Chapter, ex: grading.Exercise, k: int,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SLIPS_ONLY_HIDDEN_TESTS_CATCH is exact: those slips pass the hand-checkable visible tests
    (an entry goes once the visible tests catch it) and the hidden cases still fail them."""
    slip = ex.slips[k]
    run_visible_tests(chapter.slug, ex.name, with_notebook_signature(slip.fn, chapter.slug,
                                                                     ex.name))
    assert "visible tests passed" in capsys.readouterr().out
    assert [r.message for r in grading.evaluate(ex.id, slip.fn) if r.message], \
        f"{ex.id}: slip {k} passes the hidden cases too"


def test_the_slip_tables_name_real_slips() -> None:
    for exercise_id, indices in SLIPS_ONLY_HIDDEN_TESTS_CATCH.items():
        slips = grading.get_exercise(exercise_id).slips
        assert indices and max(indices) < len(slips), exercise_id
    for exercise_id in VISIBLE_FAILURE:
        assert grading.get_exercise(exercise_id).slips, exercise_id


# ---- the hidden cases the statement promises ---------------------------------------------------

@pytest.mark.parametrize("exercise_id", [_param(i, i) for i in NAMED_CASES])
def test_the_hidden_cases_cover_float64_and_batch_size_one(exercise_id: str) -> None:
    names = [case.name for case in grading.get_exercise(exercise_id).cases()]
    assert any("float64" in n for n in names) and any("batch size 1" in n for n in names), names


# ---- calling course_lib is caught --------------------------------------------------------------

@pytest.mark.parametrize("exercise_id, fn, which", [
    _param(i, i, fn, which, id=id_) for (i, fn, which), id_
    in zip(REFERENCE_CALLS, _counted([row[0] for row in REFERENCE_CALLS]))])
def test_calling_course_lib_fails_with_the_reference_message(
        exercise_id: str, fn: Callable[..., Any], which: str | None) -> None:
    """Every hidden case flags the call (naming the reference where the row says which), and the
    student reads the reference-call message, in the results and from ``grading.check``."""
    results = grading.evaluate(exercise_id, fn)
    assert results and all(r.reference_called for r in results), exercise_id
    if which is not None:
        assert all(r.reference_called == which for r in results)
    assert grading.is_reference_call(results[0].message)
    message = grading.format_failures(exercise_id, results)
    assert message is not None and "calls course_lib's implementation" in message
    named = f" of '{which}'" if which else ""
    with pytest.raises(grading.ReferenceCallError,
                       match=f"calls course_lib's implementation{named}"):
        grading.check(exercise_id, fn)
