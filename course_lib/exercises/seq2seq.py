"""Graded exercises of chapter 1, "Sequence to sequence, and why attention".

Seven exercises, each solvable with torch alone:

=========================  ======  ==================================================
exercise                   points  reference
=========================  ======  ==================================================
``sequence_loss``          2       :func:`course_lib.seq2seq.sequence_loss`
``greedy_decode``          2       :func:`course_lib.decoding.greedy_decode`
``beam_search``            3       :func:`course_lib.decoding.beam_search`
``masked_softmax``         2       :func:`course_lib.attention.masked_softmax`
``additive_score``         2       :func:`course_lib.alignment.additive_score`
``context_vector``         2       :func:`course_lib.alignment.context_vector`
``attention_decoder_step`` 3       :func:`course_lib.seq2seq.attention_decoder_step`
=========================  ======  ==================================================

Calling course_lib's implementation of *any* of them fails the exercise (the grading guard).
Cases are built on the CPU from seeded ``torch.Generator``s; their names say what they cover,
never the values. The step functions handed to the decoding exercises are tiny Markov scorers
(:func:`course_lib.decoding.markov_step`), not course_lib models, so a correct solution never
touches a forbidden function.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import alignment, attention, decoding, seq2seq
from course_lib.grading import Case, Exercise

f32, f64 = torch.float32, torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(seed: int, *shape: int, dtype: torch.dtype = f32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


def _key_mask(lengths: list[int], width: int) -> torch.Tensor:
    """``(B, width)`` bool, True at the first ``lengths[b]`` positions."""
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


# --------------------------------------------------------------------------------------------
# 1. sequence_loss: teacher-forced cross-entropy ignoring padding
# --------------------------------------------------------------------------------------------


def _loss_cases() -> list[Case]:
    def make(seed: int, B: int, T: int, V: int, lengths: list[int], dtype: torch.dtype,
             pad_id: int = 0, scale: float = 2.0) -> dict[str, Any]:
        targets = torch.randint(pad_id + 1, V, (B, T), generator=_gen(seed))
        targets = targets.masked_fill(~_key_mask(lengths, T), pad_id)
        return {"logits": scale * _randn(seed + 1, B, T, V, dtype=dtype), "targets": targets,
                "pad_id": pad_id}

    return [
        Case("float32, padded targets", lambda: make(1, 3, 5, 7, [5, 2, 4], f32)),
        Case("float64, batch size 1, no padding", lambda: make(2, 1, 6, 4, [6], f64)),
        Case("float32, one position per row is real", lambda: make(3, 4, 3, 9, [1, 1, 1, 1], f32)),
        Case("float64, pad id 1, large vocabulary",
             lambda: make(4, 2, 7, 50, [3, 7], f64, pad_id=1)),
        Case("float32, confident logits", lambda: make(5, 2, 4, 6, [4, 3], f32, scale=30.0)),
    ]


def _loss_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, (float, np.ndarray)) or np.size(got) != 1:
        return None
    logits, targets, pad = inputs["logits"], inputs["targets"], inputs["pad_id"]
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="none")
    real = targets.reshape(-1) != pad
    g = float(np.asarray(got))
    if np.isclose(g, float(flat.mean()), rtol=1e-4) and not bool(real.all()):
        return "your loss averages over the padded positions too; count only targets != pad_id"
    if np.isclose(g, float(flat[real].sum()), rtol=1e-4):
        return "your loss is the sum over tokens; the exercise asks for the mean over real tokens"
    return None


# --------------------------------------------------------------------------------------------
# 2-3. greedy_decode and beam_search, over small Markov scorers
# --------------------------------------------------------------------------------------------


def _scorer(seed: int, positions: int, vocab: int, dtype: torch.dtype, eos_bias: float = 0.0
            ) -> decoding.StepFn:
    logits = 2.0 * _randn(seed, positions, vocab, vocab, dtype=dtype)
    logits[..., 0] += eos_bias  # token 0 is <eos>: make it likelier (or rarer)
    return decoding.markov_step(logits)


def _greedy_cases() -> list[Case]:
    def make(seed: int, B: int, t0: int, vocab: int, max_new: int, dtype: torch.dtype,
             eos_bias: float = 0.0) -> dict[str, Any]:
        prompt = torch.randint(1, vocab, (B, t0), generator=_gen(seed + 100))
        return {"step": _scorer(seed, 6, vocab, dtype, eos_bias), "prompt": prompt,
                "max_new_tokens": max_new, "eos_id": 0}

    return [
        Case("float32 scorer, batch of 4, rows end at different steps",
             lambda: make(1, 4, 1, 5, 8, f32, eos_bias=0.5)),
        Case("float64 scorer, batch size 1", lambda: make(2, 1, 1, 6, 7, f64, eos_bias=0.5)),
        Case("prompt of three tokens", lambda: make(3, 3, 3, 5, 5, f32, eos_bias=0.5)),
        Case("<eos> is rare: every row runs to max_new_tokens",
             lambda: make(4, 3, 1, 4, 6, f64, eos_bias=-20.0)),
        Case("<eos> is likely: every row stops early",
             lambda: make(5, 5, 1, 4, 9, f32, eos_bias=6.0)),
    ]


def _greedy_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray) or got.ndim != 2 or got.shape[0] != expected.shape[0]:
        return None
    t0 = inputs["prompt"].shape[1]
    if got.shape[1] >= t0 and not np.array_equal(got[:, :t0], expected[:, :t0]):
        return "the output must start with the prompt, unchanged"
    if got.shape[1] > expected.shape[1]:
        return ("you keep decoding after every row has produced <eos> (or beyond max_new_tokens); "
                "stop as soon as all rows are finished")
    if got.shape[1] < expected.shape[1]:
        return "you stop too early: go on until every row has produced <eos> or max_new_tokens"
    width = min(got.shape[1], expected.shape[1])
    eos = inputs["eos_id"]
    for b in range(expected.shape[0]):
        row_e, row_g = expected[b, t0:width], got[b, t0:width]
        if eos in row_e:
            end = int(np.argmax(row_e == eos))
            same_until_eos = np.array_equal(row_g[:end + 1], row_e[:end + 1])
            if same_until_eos and not np.array_equal(row_g, row_e):
                return f"row {b} is right up to its <eos>; after it, write eos_id in every position"
    return None


def _beam_cases() -> list[Case]:
    def make(seed: int, t0: int, vocab: int, k: int, max_new: int, dtype: torch.dtype,
             eos_bias: float = 0.0) -> dict[str, Any]:
        prompt = torch.randint(1, vocab, (1, t0), generator=_gen(seed + 100))
        return {"step": _scorer(seed, 6, vocab, dtype, eos_bias), "prompt": prompt,
                "beam_width": k, "max_new_tokens": max_new, "eos_id": 0}

    return [
        Case("float32 scorer, beam of 2", lambda: make(5, 1, 5, 2, 6, f32)),
        Case("float64 scorer, beam of 3", lambda: make(18, 1, 6, 3, 6, f64, eos_bias=0.5)),
        Case("beam of 1 (greedy)", lambda: make(3, 1, 5, 1, 5, f32)),
        Case("prompt of two tokens, beam of 4", lambda: make(2, 2, 5, 4, 5, f64)),
        Case("<eos> likely: finished hypotheses must stay in the beam",
             lambda: make(12, 1, 4, 3, 7, f32, eos_bias=1.5)),
        Case("<eos> rare: hypotheses run to max_new_tokens",
             lambda: make(2, 1, 4, 3, 4, f64, eos_bias=-20.0)),
        Case("wide beam (exhaustive)", lambda: make(28, 1, 3, 27, 3, f64)),
    ]


def _sequence_log_prob(step: decoding.StepFn, tokens: np.ndarray, t0: int) -> float:
    total = 0.0
    for t in range(t0, len(tokens)):
        prefix = torch.as_tensor(tokens[None, :t], dtype=torch.long)
        total += float(torch.log_softmax(step(prefix), -1)[0, int(tokens[t])])
    return total


def _beam_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 2 and isinstance(got[0], np.ndarray)):
        return "return a pair (tokens, score): tokens a 1-D long tensor, score a 0-d tensor"
    tokens, score = got
    exp_tokens, exp_score = expected
    if tokens.ndim != 1:
        return f"tokens must be 1-D (t0 + n,), got shape {tokens.shape}"
    t0 = inputs["prompt"].shape[1]
    if np.array_equal(tokens, exp_tokens):
        return ("the tokens are right; the score must be their total log-probability "
                "(not normalised)")
    greedy = decoding.greedy_decode(inputs["step"], inputs["prompt"], inputs["max_new_tokens"],
                                    inputs["eos_id"])[0].numpy()
    if np.array_equal(tokens, greedy):
        return ("you returned the greedy sequence; keep beam_width hypotheses at each step and "
                "let finished ones compete with the unfinished")
    try:
        own = _sequence_log_prob(inputs["step"], tokens, t0)
    except (IndexError, RuntimeError):
        return None
    if np.size(score) == 1 and not np.isclose(float(np.asarray(score)), own, rtol=1e-4, atol=1e-6):
        return "your score is not the total log-probability of the tokens you return"
    if own < float(np.asarray(exp_score)):
        return "you returned a sequence less probable than the best one in the final beam"
    return None


# --------------------------------------------------------------------------------------------
# 4. masked_softmax
# --------------------------------------------------------------------------------------------


def _softmax_cases() -> list[Case]:
    def padded() -> dict[str, Any]:
        return {"scores": _randn(1, 2, 3, 5), "mask": _key_mask([5, 2], 5)[:, None, :]}

    def batch_one() -> dict[str, Any]:
        return {"scores": _randn(2, 1, 1, 4, dtype=f64),
                "mask": torch.tensor([[[True, True, False, True]]])}

    def fully_masked() -> dict[str, Any]:
        mask = torch.rand(3, 4, 6, generator=_gen(3)) < 0.6
        mask[:, :, 1] = True
        mask[1, 2] = False  # query 2 of sequence 1 may attend to nothing
        return {"scores": _randn(4, 3, 4, 6, dtype=f64), "mask": mask}

    def all_true() -> dict[str, Any]:
        return {"scores": _randn(5, 2, 6), "mask": torch.ones(2, 6, dtype=torch.bool)}

    def large() -> dict[str, Any]:
        return {"scores": 200.0 * _randn(6, 2, 3, 4), "mask": _key_mask([4, 3], 4)[:, None, :]}

    return [Case("float32, padded keys", padded), Case("float64, batch size 1", batch_one),
            Case("float64, a fully masked row", fully_masked),
            Case("2-D scores, nothing masked", all_true),
            Case("large scores (overflow if exponentiated as they are)", large)]


def _weights_diagnose(weights: np.ndarray, mask: torch.Tensor, expected: np.ndarray,
                      what: str = "weights") -> str | None:
    if weights.shape != expected.shape:
        return None
    m = np.broadcast_to(mask.numpy(), weights.shape)
    rows = weights.reshape(-1, weights.shape[-1])
    mrows = m.reshape(-1, weights.shape[-1])
    for r, (row, mrow) in enumerate(zip(rows, mrows)):
        index = np.unravel_index(r, weights.shape[:-1])
        where = "row " + ", ".join(str(int(i)) for i in index)
        if np.isnan(row).any():
            if not mrow.any():
                return (f"{what}: {where} has every key masked and came out NaN; such a row must "
                        "be all zeros")
            return (f"{what}: {where} has NaN (exponentiating large scores overflows: subtract "
                    "the row max)")
        leaked = np.flatnonzero(~mrow & (np.abs(row) > 1e-6))
        if leaked.size:
            j = int(leaked[0])
            return f"{what}: {where}: masked key {j} got weight {row[j]:.3g}; masked keys need 0"
        total = float(row.sum())
        target = 1.0 if mrow.any() else 0.0
        if abs(total - target) > 1e-4:
            return f"{what}: {where} sums to {total:.4g}, not {target:g}"
    return None


def _softmax_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray):
        return None
    return _weights_diagnose(got, inputs["mask"], expected)


# --------------------------------------------------------------------------------------------
# 5. additive_score
# --------------------------------------------------------------------------------------------


def _additive_cases() -> list[Case]:
    def make(seed: int, B: int, T_q: int, T_k: int, d_q: int, d_k: int, d_a: int,
             dtype: torch.dtype) -> dict[str, Any]:
        return {"query": _randn(seed, B, T_q, d_q, dtype=dtype),
                "keys": _randn(seed + 1, B, T_k, d_k, dtype=dtype),
                "W_q": _randn(seed + 2, d_a, d_q, dtype=dtype) / d_q ** 0.5,
                "W_k": _randn(seed + 3, d_a, d_k, dtype=dtype) / d_k ** 0.5,
                "v": _randn(seed + 4, d_a, dtype=dtype)}

    return [
        Case("float32, d_q != d_k != d_a", lambda: make(1, 2, 3, 5, 4, 6, 7, f32)),
        Case("float64, batch size 1, one query", lambda: make(2, 1, 1, 4, 3, 3, 5, f64)),
        Case("float32, more queries than keys", lambda: make(3, 3, 6, 2, 5, 2, 4, f32)),
        Case("float64, square", lambda: make(4, 2, 4, 4, 8, 8, 8, f64)),
    ]


def _additive_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not isinstance(got, np.ndarray):
        return None
    if got.shape == expected.shape[:1] + expected.shape[2:] + expected.shape[1:2] and \
            np.allclose(np.swapaxes(got, 1, 2), expected, rtol=1e-4, atol=1e-5):
        return "your scores are transposed: the result is (B, T_q, T_k), one row per query"
    q, k = inputs["query"], inputs["keys"]
    q_proj, k_proj = q @ inputs["W_q"].T, k @ inputs["W_k"].T  # (B, T_q, d_a), (B, T_k, d_a)
    swapped = torch.tanh(q_proj[:, :, None] - k_proj[:, None]) @ inputs["v"]
    if got.shape == expected.shape and np.allclose(got, swapped.numpy(), rtol=1e-4, atol=1e-5):
        return "the score adds the two projections: tanh(W_q q + W_k k), not a difference"
    return None


# --------------------------------------------------------------------------------------------
# 6. context_vector
# --------------------------------------------------------------------------------------------


def _context_cases() -> list[Case]:
    def make(seed: int, B: int, T_q: int, T_k: int, d_v: int, dtype: torch.dtype,
             lengths: list[int] | None) -> dict[str, Any]:
        inputs = {"scores": 3.0 * _randn(seed, B, T_q, T_k, dtype=dtype),
                  "values": _randn(seed + 1, B, T_k, d_v, dtype=dtype)}
        inputs["mask"] = None if lengths is None else _key_mask(lengths, T_k)[:, None, :]
        return inputs

    def causal() -> dict[str, Any]:
        inputs = make(5, 2, 4, 4, 3, f64, None)
        inputs["mask"] = torch.ones(4, 4, dtype=torch.bool).tril()[None]
        return inputs

    def with_empty_row() -> dict[str, Any]:
        inputs = make(6, 2, 3, 5, 2, f32, None)
        mask = torch.ones(2, 3, 5, dtype=torch.bool)
        mask[1, 0] = False  # a query with no key
        mask[0, :, 3:] = False
        inputs["mask"] = mask
        return inputs

    return [
        Case("float32, padded keys", lambda: make(1, 3, 2, 6, 4, f32, [6, 3, 1])),
        Case("float64, batch size 1, no mask", lambda: make(2, 1, 3, 5, 2, f64, None)),
        Case("float32, one query per sequence", lambda: make(3, 2, 1, 7, 5, f32, [7, 4])),
        Case("float64, a mask per query", causal),
        Case("float32, a query with no key to attend to", with_empty_row),
    ]


def _context_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 2):
        return "return a pair (context, weights)"
    context, weights = got
    if not isinstance(weights, np.ndarray) or not isinstance(context, np.ndarray):
        return None
    mask = inputs["mask"]
    if mask is None:
        mask = torch.ones(inputs["scores"].shape, dtype=torch.bool)
    message = _weights_diagnose(weights, mask, expected[1])
    if message:
        return message
    right_weights = weights.shape == expected[1].shape and np.allclose(
        weights, expected[1], rtol=1e-4, atol=1e-5)
    if right_weights:
        return "the weights are right; the context must be their weighted sum of the values"
    return None


# --------------------------------------------------------------------------------------------
# 7. attention_decoder_step
# --------------------------------------------------------------------------------------------


def _fill_(module: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    """Overwrite every parameter from a seeded generator (independent of torch's global RNG)."""
    g = _gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _decoder_step_cases() -> list[Case]:
    def make(seed: int, B: int, S: int, V: int, E: int, H: int, H_enc: int, d_a: int,
             dtype: torch.dtype, lengths: list[int]) -> dict[str, Any]:
        embedding = _fill_(nn.Embedding(V, E).to(dtype), seed)
        gru_cell = _fill_(nn.GRUCell(E + H_enc, H).to(dtype), seed + 1)
        out = _fill_(nn.Linear(H + H_enc + E, V).to(dtype), seed + 2)
        memory = _randn(seed + 3, B, S, H_enc, dtype=dtype)
        W_k = _randn(seed + 4, d_a, H_enc, dtype=dtype) / H_enc ** 0.5
        return {"y_prev": torch.randint(0, V, (B,), generator=_gen(seed + 5)),
                "state": torch.tanh(_randn(seed + 6, B, H, dtype=dtype)),
                "memory": memory, "keys": memory @ W_k.T,
                "memory_mask": _key_mask(lengths, S),
                "embedding": embedding, "gru_cell": gru_cell,
                "W_q": _randn(seed + 7, d_a, H, dtype=dtype) / H ** 0.5,
                "v": _randn(seed + 8, d_a, dtype=dtype), "out": out}

    return [
        Case("float32, padded sources", lambda: make(1, 3, 6, 9, 4, 5, 6, 7, f32, [6, 2, 4])),
        Case("float64, batch size 1", lambda: make(2, 1, 4, 5, 3, 4, 4, 3, f64, [4])),
        Case("float32, H != H_enc, one source token",
             lambda: make(3, 2, 5, 7, 2, 3, 8, 4, f32, [1, 5])),
        Case("float64, no padding", lambda: make(4, 2, 3, 6, 5, 6, 2, 5, f64, [3, 3])),
    ]


def _decoder_step_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 3):
        return "return a triple (logits, new_state, weights)"
    names = ("logits", "new_state", "weights")
    if all(isinstance(g, np.ndarray) for g in got):
        weight_message = _weights_diagnose(got[2], inputs["memory_mask"], expected[2])
        if weight_message:
            return weight_message
        ok = [g.shape == e.shape and np.allclose(g, e, rtol=1e-4, atol=1e-5)
              for g, e in zip(got, expected)]
        if not ok[2]:
            return ("the attention weights are wrong: score every key with the previous state "
                    "s_{t-1} as the query, v^T tanh(W_q s + keys)")
        if not ok[1]:
            return ("the weights are right but the new state is not: feed [embedding(y_prev); "
                    "context] (in that order) to gru_cell with the previous state")
        if not ok[0]:
            return ("weights and state are right; the logits are "
                    "out([new_state; context; embedding])")
        return None
    return f"expected tensors for {', '.join(names)}"


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="seq2seq.sequence_loss", reference=seq2seq.sequence_loss,
             cases=_loss_cases, diagnose=_loss_diagnose),
    Exercise(id="seq2seq.greedy_decode", reference=decoding.greedy_decode,
             cases=_greedy_cases, diagnose=_greedy_diagnose),
    Exercise(id="seq2seq.beam_search", reference=decoding.beam_search,
             cases=_beam_cases, diagnose=_beam_diagnose),
    Exercise(id="seq2seq.masked_softmax", reference=attention.masked_softmax,
             cases=_softmax_cases, diagnose=_softmax_diagnose),
    Exercise(id="seq2seq.additive_score", reference=alignment.additive_score,
             cases=_additive_cases, diagnose=_additive_diagnose),
    Exercise(id="seq2seq.context_vector", reference=alignment.context_vector,
             cases=_context_cases, diagnose=_context_diagnose),
    Exercise(id="seq2seq.attention_decoder_step", reference=seq2seq.attention_decoder_step, cases=_decoder_step_cases, diagnose=_decoder_step_diagnose),
]}
