"""Chapter 1's graded exercises: torch-only solutions pass, slips fail with a helpful message,
and solutions that call course_lib's implementations fail with the reference-call message."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from course_lib import alignment, attention, decoding, grading, seq2seq
from course_lib.exercises import seq2seq as ex1

pytestmark = pytest.mark.ch01


# --------------------------------------------------------------------------------------------
# Solutions a student could write: torch only (the same code as the solution notebook's cells)
# --------------------------------------------------------------------------------------------


def sequence_loss(logits, targets, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id)


def greedy_decode(step, prompt, max_new_tokens, eos_id):
    tokens = prompt
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        next_token = step(tokens).argmax(dim=-1)
        next_token = torch.where(finished, torch.full_like(next_token, eos_id), next_token)
        finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if finished.all():
            break
    return tokens


def beam_search(step, prompt, beam_width, max_new_tokens, eos_id):
    beams = [(prompt[0].tolist(), 0.0, False)]  # (tokens, score, finished)
    score_dtype = None
    for _ in range(max_new_tokens):
        if all(done for _, _, done in beams):
            break
        candidates = []
        for tokens, score, done in beams:
            if done:
                candidates.append((tokens, score, True))
                continue
            log_probs = torch.log_softmax(step(torch.tensor([tokens])), dim=-1)[0]
            score_dtype = log_probs.dtype
            for v, lp in enumerate(log_probs.tolist()):
                candidates.append((tokens + [v], score + lp, v == eos_id))
        candidates.sort(key=lambda c: -c[1])
        beams = candidates[:beam_width]
    tokens, score, _ = max(beams, key=lambda c: c[1])
    return torch.tensor(tokens), torch.tensor(score, dtype=score_dtype)


def masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)  # a fully masked row: 0/0 -> 0


def additive_score(query, keys, W_q, W_k, v):
    q = query @ W_q.T  # (B, T_q, d_a)
    k = keys @ W_k.T  # (B, T_k, d_a)
    return torch.tanh(q[:, :, None, :] + k[:, None, :, :]) @ v


def context_vector(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ values, weights


def attention_decoder_step(y_prev, state, memory, keys, memory_mask, embedding, gru_cell, W_q, v,
                           out):
    scores = torch.tanh((state @ W_q.T)[:, None, :] + keys) @ v  # (B, S)
    weights = torch.softmax(scores.masked_fill(~memory_mask, float("-inf")), dim=-1)
    context = torch.einsum("bs,bsh->bh", weights, memory)
    emb = embedding(y_prev)
    new_state = gru_cell(torch.cat([emb, context], dim=-1), state)
    return out(torch.cat([new_state, context, emb], dim=-1)), new_state, weights


SOLUTIONS: dict[str, Callable[..., Any]] = {
    "sequence_loss": sequence_loss, "greedy_decode": greedy_decode, "beam_search": beam_search,
    "masked_softmax": masked_softmax, "additive_score": additive_score,
    "context_vector": context_vector, "attention_decoder_step": attention_decoder_step,
}


# --------------------------------------------------------------------------------------------
# Slips a student could make, and the message each must get
# --------------------------------------------------------------------------------------------


def loss_with_padding(logits, targets, pad_id):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def greedy_without_stopping(step, prompt, max_new_tokens, eos_id):
    tokens = prompt
    for _ in range(max_new_tokens):
        tokens = torch.cat([tokens, step(tokens).argmax(-1, keepdim=True)], dim=1)
    return tokens


def beam_that_is_greedy(step, prompt, beam_width, max_new_tokens, eos_id):
    tokens = greedy_decode(step, prompt, max_new_tokens, eos_id)[0]
    logp = sum(float(torch.log_softmax(step(tokens[None, :t]), -1)[0, tokens[t]])
               for t in range(prompt.shape[1], len(tokens)))
    return tokens, torch.tensor(logp, dtype=torch.float64)


def softmax_with_nan_rows(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def softmax_ignoring_mask(scores, mask):
    return torch.softmax(scores, dim=-1)


def additive_transposed(query, keys, W_q, W_k, v):
    return additive_score(query, keys, W_q, W_k, v).transpose(1, 2)


def context_from_scores(scores, values, mask=None):
    _, weights = context_vector(scores, values, mask)
    return scores @ values, weights


def step_with_new_state_as_query(y_prev, state, memory, keys, memory_mask, embedding, gru_cell,
                                 W_q, v, out):
    emb = embedding(y_prev)
    new_state = gru_cell(torch.cat([emb, memory.mean(1)], dim=-1), state)
    scores = torch.tanh((new_state @ W_q.T)[:, None, :] + keys) @ v
    weights = masked_softmax(scores, memory_mask)
    context = torch.einsum("bs,bsh->bh", weights, memory)
    return out(torch.cat([new_state, context, emb], dim=-1)), new_state, weights


WRONG = [
    ("sequence_loss", loss_with_padding, "padded positions"),
    ("greedy_decode", greedy_without_stopping, "after every row has produced <eos>"),
    ("beam_search", beam_that_is_greedy, "greedy sequence"),
    ("masked_softmax", softmax_with_nan_rows, "must be all zeros"),
    ("masked_softmax", softmax_ignoring_mask, "masked key"),
    ("additive_score", additive_transposed, "transposed"),
    ("context_vector", context_from_scores, "weights are right"),
    ("attention_decoder_step", step_with_new_state_as_query, "previous state"),
]


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_every_exercise_has_a_solution_here() -> None:
    assert sorted(f"seq2seq.{name}" for name in SOLUTIONS) == sorted(ex1.EXERCISES)
    assert sum(ex.points for ex in ex1.EXERCISES.values()) == 16


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_reference_passes_its_own_cases(name: str) -> None:
    ex = grading.get_exercise(f"seq2seq.{name}")
    for case in ex.cases():
        got = grading.to_plain(ex.run(ex.reference, case.inputs()))
        assert grading.judge(ex, case, got, None, None) is None, case.name


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_torch_only_solution_passes(name: str) -> None:
    results = grading.evaluate(f"seq2seq.{name}", SOLUTIONS[name])
    assert grading.format_failures(f"seq2seq.{name}", results) is None


@pytest.mark.parametrize("name, wrong, hint", WRONG, ids=[f"{n}-{w.__name__}" for n, w, _ in WRONG])
def test_wrong_solution_fails_with_a_helpful_message(name: str, wrong, hint: str) -> None:
    results = grading.evaluate(f"seq2seq.{name}", wrong)
    message = grading.format_failures(f"seq2seq.{name}", results)
    assert message is not None and hint in message, message


CALLERS: dict[str, Callable[..., Any]] = {
    "sequence_loss": lambda logits, targets, pad_id: seq2seq.sequence_loss(logits, targets, pad_id),
    "greedy_decode": lambda step, prompt, max_new_tokens, eos_id: decoding.greedy_decode(
        step, prompt, max_new_tokens, eos_id),
    "beam_search": lambda step, prompt, beam_width, max_new_tokens, eos_id: decoding.beam_search(
        step, prompt, beam_width, max_new_tokens, eos_id),
    "masked_softmax": lambda scores, mask: attention.masked_softmax(scores, mask),
    "additive_score": lambda query, keys, W_q, W_k, v: alignment.additive_score(query, keys, W_q,
                                                                                W_k, v),
    "context_vector": lambda scores, values, mask=None: alignment.context_vector(scores, values,
                                                                                 mask),
    "attention_decoder_step": lambda **kw: seq2seq.attention_decoder_step(**kw),
}


@pytest.mark.parametrize("name", sorted(CALLERS))
def test_calling_the_reference_fails_with_the_reference_message(name: str) -> None:
    results = grading.evaluate(f"seq2seq.{name}", CALLERS[name])
    message = grading.format_failures(f"seq2seq.{name}", results)
    assert message is not None and "calls course_lib's implementation" in message
    assert all(r.reference_called == f"seq2seq.{name}" for r in results)


def test_calling_another_exercises_reference_is_caught_too() -> None:
    def context_via_masked_softmax(scores, values, mask=None):
        weights = attention.masked_softmax(scores, mask)
        return weights @ values, weights

    results = grading.evaluate("seq2seq.context_vector", context_via_masked_softmax)
    assert all(r.reference_called == "seq2seq.masked_softmax" for r in results)


def test_greedy_and_beam_cases_are_discriminating() -> None:
    """Some greedy case has rows that stop at different steps; some beam case beats greedy."""
    ragged = False
    for case in ex1.EXERCISES["seq2seq.greedy_decode"].cases():
        out = decoding.greedy_decode(**case.inputs())
        t0 = case.inputs()["prompt"].shape[1]
        ends = {int((row[t0:] == 0).int().argmax()) if (row[t0:] == 0).any() else -1 for row in out}
        ragged |= len(ends) > 1
    assert ragged
    beats = 0
    for case in ex1.EXERCISES["seq2seq.beam_search"].cases():
        inputs = case.inputs()
        tokens, _ = decoding.beam_search(**inputs)
        greedy = decoding.greedy_decode(inputs["step"], inputs["prompt"], inputs["max_new_tokens"],
                                        inputs["eos_id"])[0]
        beats += tokens.tolist() != greedy.tolist()
    assert beats >= 5
