"""Graded exercises of chapter 1, "Sequence to sequence, and why attention".

In notebook order (points live in the notebook's test cells only):

===========================  ===========================================================
exercise                     reference
===========================  ===========================================================
``collision_loss``           :func:`course_lib.seq2seq.collision_loss_bound` (a bound to
                             derive: sources that share the decoder's one vector)
``greedy_decode``            :func:`course_lib.decoding.greedy_decode`
``beam_search``              :func:`course_lib.decoding.beam_search`
``beam_vs_greedy``           a question: can two beams lose to greedy search?
``beam_cost``                :func:`course_lib.decoding.beam_search_cost` (a count to derive)
``masked_softmax``           :func:`course_lib.attention.masked_softmax`
``additive_score``           :func:`course_lib.alignment.additive_score`
``context_vector``           :func:`course_lib.alignment.context_vector`
``attention_decoder_step``   :func:`course_lib.seq2seq.attention_decoder_step` (a given step
                             whose attention is uniform, to debug)
``uniform_attention``        a prediction: the trained model with its attention made uniform
``offset_attention``         :func:`course_lib.seq2seq.offset_attention` (a design under a
                             constraint, graded by property: :func:`offset_verdicts`)
===========================  ===========================================================

Calling course_lib's implementation of *any* of them fails the exercise (the grading guard).
Cases are built on the CPU from seeded generators; their names say what they cover, never the
values. The step functions handed to the decoding exercises are tiny Markov scorers
(:func:`course_lib.decoding.markov_step`), not course_lib models, so a correct solution never
touches a forbidden function. Slips are torch-only wrong implementations; a question's slips
explain why a wrong letter is wrong without naming the right one.

No statement allows a course_lib module and no visible test imports one, so this module declares
no ``SANDBOX_MODULES``. The hidden inputs of the decoding exercises hold
:class:`course_lib.decoding.MarkovStep` objects, so the grader's sandbox holds
:mod:`course_lib.decoding` to unpickle them (``autograder.strip.sandbox_modules`` finds it in the
inputs); the functions of it that compute an answer (``greedy_decode``, ``beam_search``,
``beam_search_cost``) are references of these exercises, stripped there and forbidden everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from course_lib import alignment, attention, decoding, seq2seq
from course_lib.exercises._common import f32, f64, gen, lengths_mask, lower_triangle, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

# 1. collision_loss (a bound to derive) -------------------------------------------------------
_DIGITS = "0123456789-"


def _random_string(g: torch.Generator, length: int) -> str:
    return "".join(_DIGITS[int(i)] for i in torch.randint(len(_DIGITS), (length,), generator=g))


def _collision_cases() -> list[Case]:
    def group(seed: int, m: int, distinct: int, length: int) -> dict[str, Any]:
        """``m`` targets, ``distinct`` of them different, each distinct one at least once."""
        g = gen(seed)
        kinds: list[str] = []
        while len(kinds) < distinct:
            t = _random_string(g, length)
            if t not in kinds:
                kinds.append(t)
        extra = torch.randint(distinct, (m - distinct,), generator=g).tolist()
        targets = kinds + [kinds[i] for i in extra]
        order = torch.randperm(m, generator=g).tolist()
        return {"targets": [targets[i] for i in order]}

    def one_char_apart() -> dict[str, Any]:
        g = gen(31)
        base = _random_string(g, pick(32, 6, 10))
        at = pick(33, 0, len(base) - 1)
        other = base[:at] + ("7" if base[at] != "7" else "3") + base[at + 1:]
        return {"targets": [base, other]}

    def prefix() -> dict[str, Any]:
        g = gen(34)
        base = _random_string(g, pick(35, 5, 9))
        cut = pick(36, 1, len(base) - 1)
        return {"targets": [base, base[:cut], base, base[:cut], base]}

    return [
        Case("two targets one character apart", one_char_apart),
        Case("two targets that differ in many places",
             lambda: group(1, 2, 2, pick(2, 8, 12))),
        Case("repeated targets", lambda: group(3, pick(4, 6, 12), pick(5, 2, 4), pick(6, 3, 8))),
        Case("a target that is a prefix of another", prefix),
        Case("one source", lambda: group(7, 1, 1, pick(8, 4, 10))),
        Case("many sources, few distinct targets",
             lambda: group(9, pick(10, 20, 60), pick(11, 2, 6), 10)),
        Case("every target different",
             lambda: group(12, pick(13, 3, 9), pick(13, 3, 9), pick(14, 4, 10))),
    ]


def _collision_slip(kind: str) -> Any:
    """``collision_loss`` worked out in one wrong way (plain Python, no reference)."""
    def loss(targets: list[str]) -> float:
        m = len(targets)

        def entropy_total(items: list[str]) -> float:
            counts: dict[str, int] = {}
            for x in items:
                counts[x] = counts.get(x, 0) + 1
            return -sum(n * math.log(n / m) for n in counts.values())

        if kind == "per_position":  # each common position on its own, ignoring the prefixes
            return sum(entropy_total([t[i] for t in targets])
                       for i in range(min(len(t) for t in targets)))
        if kind == "all_distinct":
            return m * math.log(m)
        total = entropy_total(list(targets))
        return {"bits": total / math.log(2), "mean": total / m}[kind]
    return loss


_COLLISION_SLIPS = (
    Slip("after the first token where two targets part, teacher forcing feeds each its own "
         "prefix, and the decoder may tell them apart from there on; and <eos> ends every "
         "target, so a target that is a prefix of another is a different sequence",
         _collision_slip("per_position")),
    Slip("equal targets are one output sequence: the decoder may put all the probability they "
         "need on it", _collision_slip("all_distinct")),
    Slip("the loss is in nats (natural logarithms), not bits", _collision_slip("bits")),
    Slip("return the total over the m pairs, not the mean per pair", _collision_slip("mean")),
)


# 2. greedy_decode ----------------------------------------------------------------------------
def _scorer(seed: int, positions: int, vocab: int, dtype: torch.dtype, eos_bias: float = 0.0
            ) -> decoding.StepFn:
    logits = randn(seed, positions, vocab, vocab, dtype=dtype, scale=2.0)
    logits[..., 0] += eos_bias  # token 0 is <eos>: make it likelier (or rarer)
    return decoding.markov_step(logits)


def _stop_step(inputs: dict[str, Any], row: int) -> int:
    """The step at which greedy search emits ``eos_id`` in ``row`` (-1: never), torch only."""
    tokens = inputs["prompt"][row:row + 1]
    for t in range(inputs["max_new_tokens"]):
        nxt = int(inputs["step"](tokens)[0].argmax())
        if nxt == inputs["eos_id"]:
            return t
        tokens = torch.cat([tokens, torch.tensor([[nxt]])], dim=1)
    return -1


def _greedy_cases() -> list[Case]:
    def make(seed: int, B: int, t0: int, vocab: int, max_new: int, dtype: torch.dtype,
             eos_bias: float = 0.0, ragged: bool = False) -> dict[str, Any]:
        # With ``ragged`` the first of a few seeds whose rows stop at different steps, whatever
        # the grading run's secret.
        for attempt in range(64):
            s = seed + 1000 * attempt
            prompt = torch.randint(1, vocab, (B, t0), generator=gen(s + 100))
            inputs = {"step": _scorer(s, 6, vocab, dtype, eos_bias), "prompt": prompt,
                      "max_new_tokens": max_new, "eos_id": 0}
            if not ragged or len({_stop_step(inputs, b) for b in range(B)}) > 1:
                return inputs
        raise RuntimeError(f"no seed from {seed} gives rows that stop at different steps")

    return [
        Case("float32 scorer, batch of 4, rows end at different steps",
             lambda: make(1, 4, 1, 5, 8, f32, eos_bias=0.5, ragged=True)),
        Case("float64 scorer, batch size 1", lambda: make(2, 1, 1, 6, 7, f64, eos_bias=0.5)),
        Case("prompt of three tokens", lambda: make(3, 3, 3, 5, 5, f32, eos_bias=0.5)),
        Case("<eos> is rare: every row runs to max_new_tokens",
             lambda: make(4, 3, 1, 4, 6, f64, eos_bias=-20.0)),
        Case("<eos> is likely: every row stops early",
             lambda: make(5, 5, 1, 4, 9, f32, eos_bias=6.0)),
    ]


def _greedy_never_stops(step: decoding.StepFn, prompt: torch.Tensor, max_new_tokens: int,
                        eos_id: int) -> torch.Tensor:
    tokens = prompt
    for _ in range(max_new_tokens):
        tokens = torch.cat([tokens, step(tokens).argmax(-1, keepdim=True)], dim=1)
    return tokens


def _greedy_no_padding(step: decoding.StepFn, prompt: torch.Tensor, max_new_tokens: int,
                       eos_id: int) -> torch.Tensor:
    tokens, finished = prompt, torch.zeros(prompt.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        next_token = step(tokens).argmax(-1)
        finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if finished.all():
            break
    return tokens


def _greedy_stops_at_first_eos(step: decoding.StepFn, prompt: torch.Tensor, max_new_tokens: int,
                               eos_id: int) -> torch.Tensor:
    tokens = prompt
    for _ in range(max_new_tokens):
        next_token = step(tokens).argmax(-1)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if (next_token == eos_id).any():
            break
    return tokens


def _greedy_without_prompt(step: decoding.StepFn, prompt: torch.Tensor, max_new_tokens: int,
                           eos_id: int) -> torch.Tensor:
    tokens, finished = prompt, torch.zeros(prompt.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        next_token = step(tokens).argmax(-1).masked_fill(finished, eos_id)
        finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if finished.all():
            break
    return tokens[:, prompt.shape[1]:]


_GREEDY_SLIPS = (
    Slip("return the prompt followed by the new tokens: (B, t0 + n)", _greedy_without_prompt),
    Slip("after a row has produced <eos>, every later position of that row holds eos_id; it "
         "does not go on choosing tokens", _greedy_no_padding),
    Slip("you stop when the first row finishes; go on until every row has produced <eos> (or "
         "max_new_tokens is reached)", _greedy_stops_at_first_eos),
    Slip("you keep decoding after every row has produced <eos>; stop as soon as all rows are "
         "finished, and pad finished rows with eos_id", _greedy_never_stops),
)


# 3. beam_search ------------------------------------------------------------------------------
def _beam_cases() -> list[Case]:
    def make(seed: int, t0: int, vocab: int, k: int, max_new: int, dtype: torch.dtype,
             eos_bias: float = 0.0, beats_greedy: bool = False) -> dict[str, Any]:
        # With ``beats_greedy`` the first of a few seeds whose beam differs from greedy search:
        # whatever the grading run's secret, returning the greedy sequence fails this case.
        for attempt in range(64):
            s = seed + 1000 * attempt
            prompt = torch.randint(1, vocab, (1, t0), generator=gen(s + 100))
            inputs: dict[str, Any] = {"step": _scorer(s, 6, vocab, dtype, eos_bias),
                                      "prompt": prompt, "beam_width": k,
                                      "max_new_tokens": max_new, "eos_id": 0}
            if not beats_greedy or (_beam(**inputs)[0] != _beam(**{**inputs, "beam_width": 1})[0]):
                return inputs
        raise RuntimeError(f"no seed from {seed} gives a beam that differs from greedy search")

    return [
        Case("float32 scorer, beam of 2", lambda: make(5, 1, 5, 2, 6, f32, beats_greedy=True)),
        Case("float64 scorer, beam of 3", lambda: make(18, 1, 6, 3, 6, f64, eos_bias=0.5,
                                                        beats_greedy=True)),
        Case("beam of 1 (greedy)", lambda: make(3, 1, 5, 1, 5, f32)),
        Case("prompt of two tokens, beam of 4", lambda: make(2, 2, 5, 4, 5, f64,
                                                              beats_greedy=True)),
        Case("<eos> likely: finished hypotheses must stay in the beam",
             lambda: make(12, 1, 4, 3, 7, f32, eos_bias=1.5, beats_greedy=True)),
        Case("<eos> rare: hypotheses run to max_new_tokens",
             lambda: make(2, 1, 4, 3, 4, f64, eos_bias=-20.0, beats_greedy=True)),
        Case("wide beam (exhaustive)", lambda: make(28, 1, 3, 27, 3, f64)),
    ]


def _beam(step: decoding.StepFn, prompt: torch.Tensor, beam_width: int, max_new_tokens: int,
          eos_id: int, *, extend_finished: bool = False
          ) -> tuple[list[int], float, torch.dtype, int]:
    """A plain beam search for the slips: ``(tokens list, raw score, dtype, new-token count)``."""
    beams = [(prompt[0].tolist(), 0.0, False)]  # (tokens, score, finished)
    dtype = torch.float32
    for _ in range(max_new_tokens):
        if all(done for _, _, done in beams):
            break
        candidates = []
        for tokens, score, done in beams:
            if done and not extend_finished:
                candidates.append((tokens, score, True))
                continue
            log_probs = torch.log_softmax(step(torch.tensor([tokens])), dim=-1)[0]
            dtype = log_probs.dtype
            for v, lp in enumerate(log_probs.tolist()):
                candidates.append((tokens + [v], score + lp, v == eos_id and not extend_finished))
        candidates.sort(key=lambda c: -c[1])
        beams = candidates[:beam_width]
    tokens, score, _ = max(beams, key=lambda c: c[1])
    return tokens, score, dtype, len(tokens) - prompt.shape[1]


def _beam_normalised_score(step: decoding.StepFn, prompt: torch.Tensor, beam_width: int,
                           max_new_tokens: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, score, dtype, n = _beam(step, prompt, beam_width, max_new_tokens, eos_id)
    return torch.tensor(tokens), torch.tensor(score / max(n, 1), dtype=dtype)


def _beam_probability(step: decoding.StepFn, prompt: torch.Tensor, beam_width: int,
                      max_new_tokens: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, score, dtype, _ = _beam(step, prompt, beam_width, max_new_tokens, eos_id)
    return torch.tensor(tokens), torch.tensor(score, dtype=dtype).exp()


def _beam_extends_finished(step: decoding.StepFn, prompt: torch.Tensor, beam_width: int,
                           max_new_tokens: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, score, dtype, _ = _beam(step, prompt, beam_width, max_new_tokens, eos_id,
                                    extend_finished=True)
    return torch.tensor(tokens), torch.tensor(score, dtype=dtype)


def _beam_is_greedy(step: decoding.StepFn, prompt: torch.Tensor, beam_width: int,
                    max_new_tokens: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, score, dtype, _ = _beam(step, prompt, 1, max_new_tokens, eos_id)
    return torch.tensor(tokens), torch.tensor(score, dtype=dtype)


_BEAM_SLIPS = (
    Slip("the tokens are right; the score is their total log-probability (a sum, not divided by "
         "the length)", _beam_normalised_score),
    Slip("the tokens are right; the score is the log-probability (the sum of log_softmax "
         "values), not the probability", _beam_probability),
    Slip("a finished hypothesis (ending in eos_id) stays in the beam as it is: it competes with "
         "its score, and is not extended", _beam_extends_finished),
    Slip("you returned the greedy sequence; keep beam_width hypotheses at each step, ranked by "
         "their total log-probability", _beam_is_greedy),
)


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
    if tokens.ndim != 1:
        return f"tokens must be 1-D (t0 + n,), got shape {tokens.shape}"
    try:
        own = _sequence_log_prob(inputs["step"], tokens, inputs["prompt"].shape[1])
    except (IndexError, RuntimeError, ValueError):
        return None
    if np.size(score) == 1 and not np.isclose(float(np.asarray(score)), own, rtol=1e-4, atol=1e-6):
        return "your score is not the total log-probability of the tokens you return"
    if own < float(np.asarray(expected[1])):
        return "you returned a sequence less probable than the best one of the final beam"
    return None


# 4. beam_vs_greedy (a question) --------------------------------------------------------------
_BEAM_VS_GREEDY = Question(
    id="seq2seq.beam_vs_greedy", choices="abcd",
    hint=("follow both searches step by step on a small model: which prefixes does each "
          "keep, and can greedy's prefix drop out of the beam at a step where other "
          "prefixes score higher?"))


# 5. beam_cost -------------------------------------------------------------------------------
# Every case is far too large to run a search and count its calls (a million steps, beams of
# millions, vocabularies of up to a trillion tokens, or an exhaustive beam over 2^40 prefixes),
# and its counts pass 2^53: only a derivation in exact integers passes. A loop over the n steps
# that counts (b_{t+1} = min(k, V b_t)) still finishes in about a second per case.
def _cost_cases() -> list[Case]:
    def narrow() -> dict[str, Any]:  # a beam far narrower than the vocabulary
        return {"beam_width": pick(1, 2, 6), "vocab_size": pick(2, 10_000, 50_000),
                "max_new_tokens": pick(3, 200_000, 1_000_000), "prompt_len": pick(4, 1, 5)}

    def wide() -> dict[str, Any]:  # V^t < k for the first steps
        V = pick(5, 2, 4)
        return {"beam_width": pick(6, 100_000, 3_000_000), "vocab_size": V,
                "max_new_tokens": pick(7, 200_000, 1_000_000), "prompt_len": pick(8, 1, 3)}

    def exhaustive() -> dict[str, Any]:  # wider than every prefix there is
        V, n = pick(9, 2, 3), pick(10, 40, 60)
        return {"beam_width": V ** n + pick(11, 0, 5), "vocab_size": V, "max_new_tokens": n,
                "prompt_len": 1}

    def greedy() -> dict[str, Any]:
        return {"beam_width": 1, "vocab_size": pick(12, 10_000, 100_000),
                "max_new_tokens": pick(13, 200_000, 1_000_000), "prompt_len": pick(14, 1, 4)}

    def one_step() -> dict[str, Any]:
        return {"beam_width": pick(15, 2, 8), "vocab_size": pick(16, 10 ** 9, 10 ** 12),
                "max_new_tokens": 1, "prompt_len": pick(17, 1, 4)}

    def long_prompt() -> dict[str, Any]:
        return {"beam_width": pick(18, 1000, 100_000), "vocab_size": pick(19, 2, 5),
                "max_new_tokens": pick(20, 100_000, 500_000),
                "prompt_len": pick(21, 100_000, 1_000_000)}

    return [Case("a narrow beam over a large vocabulary", narrow),
            Case("a beam wider than the first steps' prefixes", wide),
            Case("a beam wider than every prefix (exhaustive search)", exhaustive),
            Case("a beam of 1 (greedy search)", greedy), Case("one step", one_step),
            Case("a long prompt", long_prompt)]


def _cost_counts(k: int, V: int, n: int, t0: int, always_k: bool = False) -> tuple[int, int, int]:
    """(prefixes, sum over steps of b_t t, widest beam) in closed form: the beam grows for at
    most log2(k) + 1 steps, then holds k (or 1 when V = 1). Plain Python, no reference."""
    rows = offsets = widest = 0
    live, t = (k if always_k else 1), 0
    while t < n and live < k and V > 1:
        rows, offsets, widest = rows + live, offsets + live * t, max(widest, live)
        live, t = min(k, live * V), t + 1
    if t < n:
        steps = n - t
        rows, offsets, widest = (rows + live * steps,
                                 offsets + live * ((t + n - 1) * steps // 2), max(widest, live))
    return rows, offsets, widest


def _cost_slip(kind: str) -> Any:
    """``beam_search_cost`` with one thing counted differently (torch-free, no reference)."""
    def cost(beam_width: int, vocab_size: int, max_new_tokens: int,
             prompt_len: int) -> tuple[int, int, int]:
        k, V, n, t0 = beam_width, vocab_size, max_new_tokens, prompt_len
        rows, offsets, widest = _cost_counts(k, V, n + (kind == "one_more_step"), t0,
                                             always_k=kind == "always_k")
        length = {"no_prompt": 0, "after_step": t0 + 1}.get(kind, t0)
        peak = k * V if kind == "peak_k" else widest * V
        return rows, offsets + length * rows, peak if n else 0
    return cost


_COST_SLIPS = (
    Slip("a beam holds no more hypotheses than there are distinct prefixes: the first step "
         "scores the prompt alone, the next ones at most V^t prefixes", _cost_slip("always_k")),
    Slip("n steps score n beams: the beam kept after the last step is not scored",
         _cost_slip("one_more_step")),
    Slip("the prefixes scored are right; every prefix holds the prompt's t0 tokens too",
         _cost_slip("no_prompt")),
    Slip("the prefixes scored are right; before step t a prefix holds t0 + t tokens (the token "
         "chosen at step t is not read yet)", _cost_slip("after_step")),
    Slip("the prefixes and tokens are right; the most candidates at one step is V times the "
         "widest beam scored, which stays below k while V^t < k", _cost_slip("peak_k")),
)


def _cost_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 3):
        return "return three integers: (prefixes scored, tokens read, most candidates at one step)"
    return None


# 6. masked_softmax ---------------------------------------------------------------------------
def _softmax_cases() -> list[Case]:
    def padded() -> dict[str, Any]:
        return {"scores": randn(1, 2, 3, 5), "mask": lengths_mask([5, 2], 5)[:, None, :]}

    def batch_one() -> dict[str, Any]:
        return {"scores": randn(2, 1, 1, 4, dtype=f64),
                "mask": torch.tensor([[[True, True, False, True]]])}

    def fully_masked() -> dict[str, Any]:
        mask = torch.rand(3, 4, 6, generator=gen(3)) < 0.6
        mask[:, :, 1] = True
        mask[1, 2] = False  # query 2 of sequence 1 may attend to nothing
        return {"scores": randn(4, 3, 4, 6, dtype=f64), "mask": mask}

    def all_true() -> dict[str, Any]:
        return {"scores": randn(5, 2, 6), "mask": torch.ones(2, 6, dtype=torch.bool)}

    def causal() -> dict[str, Any]:
        return {"scores": randn(7, 2, 5, 5, dtype=f64), "mask": lower_triangle(5)}

    def large() -> dict[str, Any]:
        return {"scores": randn(6, 2, 3, 4, scale=200.0),
                "mask": lengths_mask([4, 3], 4)[:, None, :]}

    return [Case("float32, padded keys", padded), Case("float64, batch size 1", batch_one),
            Case("float64, a fully masked row", fully_masked),
            Case("2-D scores, nothing masked", all_true),
            Case("float64, a causal mask", causal),
            Case("large scores (overflow if exponentiated as they are)", large)]


def _softmax_nan_rows(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _softmax_ignores_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1)


def _softmax_masks_after(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) * mask


def _softmax_naive_exp(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    e = scores.exp() * mask
    return e / e.sum(dim=-1, keepdim=True)


_SOFTMAX_SLIPS = (
    Slip("a row whose every key is masked came out NaN (0/0); such a row must be all zeros",
         _softmax_nan_rows),
    Slip("masked keys got weight: fill their scores with -inf before the softmax",
         _softmax_ignores_mask),
    Slip("you zeroed the masked weights after the softmax, so the real keys' weights no longer "
         "sum to one: mask the scores before it", _softmax_masks_after),
    Slip("exponentiating large scores overflows (inf / inf = NaN): subtract each row's maximum "
         "first, or use torch.softmax", _softmax_naive_exp),
)


def _weights_diagnose(weights: np.ndarray, mask: torch.Tensor, expected: np.ndarray,
                      what: str = "weights") -> str | None:
    """Which row is not a distribution over its real keys (NaN, a leaked key, a wrong sum)."""
    if weights.shape != expected.shape:
        return None
    m = np.broadcast_to(mask.numpy(), weights.shape)
    rows = weights.reshape(-1, weights.shape[-1])
    mrows = m.reshape(-1, weights.shape[-1])
    for r, (row, mrow) in enumerate(zip(rows, mrows)):
        index = np.unravel_index(r, weights.shape[:-1])
        where = "row " + ", ".join(str(int(i)) for i in index)
        if np.isnan(row).any():
            return f"{what}: {where} has NaN"
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


# 7. additive_score ---------------------------------------------------------------------------
def _additive_cases() -> list[Case]:
    def make(seed: int, B: int, T_q: int, T_k: int, d_q: int, d_k: int, d_a: int,
             dtype: torch.dtype) -> dict[str, Any]:
        return {"query": randn(seed, B, T_q, d_q, dtype=dtype),
                "keys": randn(seed + 1, B, T_k, d_k, dtype=dtype),
                "W_q": randn(seed + 2, d_a, d_q, dtype=dtype, scale=d_q ** -0.5),
                "W_k": randn(seed + 3, d_a, d_k, dtype=dtype, scale=d_k ** -0.5),
                "v": randn(seed + 4, d_a, dtype=dtype)}

    return [
        Case("float32, d_q != d_k != d_a", lambda: make(1, 2, 3, 5, 4, 6, 7, f32)),
        Case("float64, batch size 1, one query", lambda: make(2, 1, 1, 4, 3, 3, 5, f64)),
        Case("float32, more queries than keys", lambda: make(3, 3, 6, 2, 5, 2, 4, f32)),
        Case("float64, square weights", lambda: make(4, 2, 4, 4, 8, 8, 8, f64)),
    ]


def _additive_transposed(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor,
                         W_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k = query @ W_q.T, keys @ W_k.T
    return (torch.tanh(q[:, :, None, :] + k[:, None, :, :]) @ v).transpose(1, 2)


def _additive_difference(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor,
                         W_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k = query @ W_q.T, keys @ W_k.T
    return torch.tanh(q[:, :, None, :] - k[:, None, :, :]) @ v


def _additive_weights_untransposed(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor,
                                   W_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k = query @ W_q, keys @ W_k  # runs only where the weights are square
    return torch.tanh(q[:, :, None, :] + k[:, None, :, :]) @ v


def _additive_no_tanh(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                      v: torch.Tensor) -> torch.Tensor:
    q, k = query @ W_q.T, keys @ W_k.T
    return (q[:, :, None, :] + k[:, None, :, :]) @ v


_ADDITIVE_SLIPS = (
    Slip("your scores are transposed: the result is (B, T_q, T_k), one row per query",
         _additive_transposed),
    Slip("the score adds the two projections, tanh(W_q q + W_k k); not a difference",
         _additive_difference),
    Slip("apply the weights as nn.Linear does: W_q q is query @ W_q.T (W_q is (d_a, d_q))",
         _additive_weights_untransposed),
    Slip("apply tanh to W_q q + W_k k before the dot product with v", _additive_no_tanh),
)


# 8. context_vector ---------------------------------------------------------------------------
def _context_cases() -> list[Case]:
    def make(seed: int, B: int, T_q: int, T_k: int, d_v: int, dtype: torch.dtype,
             lengths: list[int] | None) -> dict[str, Any]:
        return {"scores": randn(seed, B, T_q, T_k, dtype=dtype, scale=3.0),
                "values": randn(seed + 1, B, T_k, d_v, dtype=dtype),
                "mask": None if lengths is None else lengths_mask(lengths, T_k)[:, None, :]}

    def causal() -> dict[str, Any]:
        return {**make(5, 2, 4, 4, 3, f64, None), "mask": lower_triangle(4)[None]}

    def with_empty_row() -> dict[str, Any]:
        mask = torch.ones(2, 3, 5, dtype=torch.bool)
        mask[1, 0] = False  # a query with no key
        mask[0, :, 3:] = False
        return {**make(6, 2, 3, 5, 2, f32, None), "mask": mask}

    return [
        Case("float32, padded keys", lambda: make(1, 3, 2, 6, 4, f32, [6, 3, 1])),
        Case("float64, batch size 1, no mask", lambda: make(2, 1, 3, 5, 2, f64, None)),
        Case("float32, one query per sequence", lambda: make(3, 2, 1, 7, 5, f32, [7, 4])),
        Case("float64, a mask per query", causal),
        Case("float32, a query with no key to attend to", with_empty_row),
    ]


def _masked_weights(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim).nan_to_num(0.0)


def _context_from_scores(scores: torch.Tensor, values: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return scores @ values, _masked_weights(scores, mask)


def _context_ignores_mask(scores: torch.Tensor, values: torch.Tensor,
                          mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _context_nan_rows(scores: torch.Tensor, values: torch.Tensor,
                      mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _context_softmax_over_queries(scores: torch.Tensor, values: torch.Tensor,
                                  mask: torch.Tensor | None = None
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    weights = _masked_weights(scores, mask, dim=1)
    return weights @ values, weights


_CONTEXT_SLIPS = (
    Slip("the weights are right; the context is their weighted sum of the values, "
         "weights @ values (not scores @ values)", _context_from_scores),
    Slip("masked keys got weight: fill their scores with -inf where mask is False, before the "
         "softmax", _context_ignores_mask),
    Slip("a query with no key came out NaN; its weights and its context must be zeros",
         _context_nan_rows),
    Slip("the softmax runs over the keys (the last dimension): each query's weights sum to one",
         _context_softmax_over_queries),
)


def _context_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 2):
        return "return a pair (context, weights)"
    context, weights = got
    if not isinstance(weights, np.ndarray) or not isinstance(context, np.ndarray):
        return None
    mask = inputs["mask"]
    if mask is None:
        mask = torch.ones(inputs["scores"].shape, dtype=torch.bool)
    return _weights_diagnose(weights, mask, expected[1])


# 9. attention_decoder_step -------------------------------------------------------------------
def _fill_(module: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    """Overwrite every parameter from a seeded generator (independent of torch's global RNG)."""
    g = gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _decoder_step_cases() -> list[Case]:
    def make(seed: int, B: int, S: int, V: int, E: int, H: int, H_enc: int, d_a: int,
             dtype: torch.dtype, lengths: list[int]) -> dict[str, Any]:
        memory = randn(seed + 3, B, S, H_enc, dtype=dtype)
        W_k = randn(seed + 4, d_a, H_enc, dtype=dtype, scale=H_enc ** -0.5)
        return {"y_prev": torch.randint(0, V, (B,), generator=gen(seed + 5)),
                "state": torch.tanh(randn(seed + 6, B, H, dtype=dtype)),
                "memory": memory, "keys": memory @ W_k.T,
                "memory_mask": lengths_mask(lengths, S),
                "embedding": _fill_(nn.Embedding(V, E).to(dtype), seed),
                "gru_cell": _fill_(nn.GRUCell(E + H_enc, H).to(dtype), seed + 1),
                "W_q": randn(seed + 7, d_a, H, dtype=dtype, scale=H ** -0.5),
                "v": randn(seed + 8, d_a, dtype=dtype),
                "out": _fill_(nn.Linear(H + H_enc + E, V).to(dtype), seed + 2)}

    return [
        Case("float32, padded sources", lambda: make(1, 3, 6, 9, 4, 5, 6, 7, f32, [6, 2, 4])),
        Case("float64, batch size 1", lambda: make(2, 1, 4, 5, 3, 4, 4, 3, f64, [4])),
        Case("float32, H != H_enc, one source token",
             lambda: make(3, 2, 5, 7, 2, 3, 8, 4, f32, [1, 5])),
        Case("float64, no padding, square W_q", lambda: make(4, 2, 3, 6, 5, 6, 2, 6, f64, [3, 3])),
    ]


def _step(y_prev: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, keys: torch.Tensor,
          memory_mask: torch.Tensor, embedding: nn.Embedding, gru_cell: nn.GRUCell,
          W_q: torch.Tensor, v: torch.Tensor, out: nn.Linear, *, query: str = "previous",
          w_q_applied: str = "transposed", masked: bool = True, cell_order: str = "emb-ctx",
          out_order: str = "state-ctx-emb",
          out_state: str = "new", given: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder step with one thing done differently (the slips below); ``given``: the step
    that the notebook hands out to debug (its softmax runs over a dimension of size one)."""
    if given:
        q = (state @ W_q.T)[:, None, :]  # (B, 1, d_a)
        col = (torch.tanh(q + keys) @ v[:, None]).masked_fill(~memory_mask[..., None],
                                                               float("-inf"))  # (B, S, 1)
        w = torch.softmax(col, dim=-1).nan_to_num(0.0)
        w = w / w.sum(dim=1, keepdim=True)
        ctx = (w * memory).sum(dim=1)
        e = embedding(y_prev)
        s_new = gru_cell(torch.cat([e, ctx], dim=-1), state)
        return out(torch.cat([s_new, ctx, e], dim=-1)), s_new, w[..., 0]
    if query == "new":  # a Luong-style order: step the cell first (on the mean context)
        pre = gru_cell(torch.cat([embedding(y_prev), memory.mean(1)], dim=-1), state)
    else:
        pre = state
    q = pre @ W_q.T if w_q_applied == "transposed" else pre @ W_q
    scores = torch.tanh(q[:, None, :] + keys) @ v  # (B, S)
    if masked:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    context = torch.einsum("bs,bsh->bh", weights, memory)
    emb = embedding(y_prev)
    parts = {"emb": emb, "ctx": context}
    new_state = gru_cell(torch.cat([parts[p] for p in cell_order.split("-")], dim=-1), state)
    parts = {"state": new_state if out_state == "new" else state, "ctx": context, "emb": emb}
    logits = out(torch.cat([parts[p] for p in out_order.split("-")], dim=-1))
    return logits, new_state, weights


_DECODER_STEP_SLIPS = (
    Slip("these are the given step's outputs: its weights are still uniform over the real "
         "source tokens, whatever the state; find which line makes them so",
         lambda **kw: _step(**kw, given=True)),
    Slip("padded source positions got weight: mask the scores with memory_mask before the "
         "softmax", lambda **kw: _step(**kw, masked=False)),
    Slip("apply W_q as nn.Linear does: W_q s is state @ W_q.T (W_q is (d_a, H))",
         lambda **kw: _step(**kw, w_q_applied="plain")),
    Slip("the attention weights are wrong: Bahdanau's query is the previous state s_{t-1}, "
         "before the cell runs", lambda **kw: _step(**kw, query="new")),
    Slip("the weights are right but the new state is not: feed [embedding(y_prev); context], "
         "in that order, to gru_cell with the previous state",
         lambda **kw: _step(**kw, cell_order="ctx-emb")),
    Slip("weights and state are right; the logits are out([new_state; context; embedding]), in "
         "that order", lambda **kw: _step(**kw, out_order="state-emb-ctx")),
    Slip("weights and state are right; the logits read the new state s_t, not s_{t-1}",
         lambda **kw: _step(**kw, out_state="previous")),
)


def _decoder_step_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if not (isinstance(got, list) and len(got) == 3
            and all(isinstance(g, np.ndarray) for g in got)):
        return "return a triple of tensors (logits, new_state, weights)"
    return _weights_diagnose(got[2], inputs["memory_mask"], expected[2])


# 10. uniform_attention (a prediction) --------------------------------------------------------
_UNIFORM_ATTENTION = Question(
    id="seq2seq.uniform_attention", choices="abcd",
    hint=("once every score is 0, what tells the decoder which source character to read at "
          "each output step? And was this model ever trained to decode from one fixed "
          "summary?"))


# 11. offset_attention (design under a constraint) -------------------------------------------
# Graded by property, not against one memorised design: the trusted side computes the weights of
# the student's parameters on positions 0 .. n - 1 and checks the rules of the statement.
_OFFSET_KEYS = ("three arrays W_q (2, 2), W_k (2, 2) and v (2,), finite",
                "every query's highest score is at key i + offset",
                "every query puts at least 0.99 of its weight on key i + offset")


def offset_weights(W_q: torch.Tensor, W_k: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
    """The ``(n, n)`` float64 weights of queries ``(i, 1)`` on keys ``(j, 1)`` under the
    additive score ``v^T tanh(W_q q + W_k k)``: row ``i``, query ``i``'s softmax over the keys."""
    W_q, W_k, v = (torch.as_tensor(x, dtype=torch.float64) for x in (W_q, W_k, v))
    pos = torch.stack([torch.arange(n, dtype=torch.float64),
                       torch.ones(n, dtype=torch.float64)], dim=-1)  # (n, 2)
    scores = torch.tanh((pos @ W_q.T)[:, None, :] + (pos @ W_k.T)[None, :, :]) @ v  # (n, n)
    return torch.softmax(scores, dim=-1)


def offset_verdicts(inputs: Mapping[str, Any], design: Any) -> dict[str, bool]:
    """``Exercise.postprocess`` of ``offset_attention``: the design checked against the rules.

    Only the queries ``i`` whose key ``i + offset`` exists (``0 <= i + offset < n``) are checked.
    """
    verdict = dict.fromkeys(_OFFSET_KEYS, False)
    try:
        W_q, W_k, v = (torch.as_tensor(np.asarray(x, dtype=np.float64)) for x in design)
    except (TypeError, ValueError):
        return verdict
    if (tuple(W_q.shape), tuple(W_k.shape), tuple(v.shape)) != ((2, 2), (2, 2), (2,)) or \
            not all(bool(torch.isfinite(x).all()) for x in (W_q, W_k, v)):
        return verdict
    verdict[_OFFSET_KEYS[0]] = True
    n, offset = inputs["n"], inputs["offset"]
    weights = offset_weights(W_q, W_k, v, n)
    rows = torch.arange(n)
    keep = (rows + offset >= 0) & (rows + offset < n)
    rows = rows[keep]
    target = rows + offset
    verdict[_OFFSET_KEYS[1]] = bool((weights[rows].argmax(-1) == target).all())
    verdict[_OFFSET_KEYS[2]] = bool((weights[rows, target] >= 0.99).all())
    return verdict


def _offset_cases() -> list[Case]:
    def make(offset: int, n: int) -> Any:
        return lambda: {"offset": offset, "n": n}

    return [
        Case("offset 0, a short source", make(0, pick(41, 3, 9))),
        Case("offset 1, a long source", make(1, pick(42, 1500, 2000))),
        Case("a negative offset", make(-pick(43, 1, 4), pick(44, 200, 600))),
        Case("a large offset, a long source", make(pick(45, 100, 400), pick(46, 1500, 2000))),
        Case("a large negative offset", make(-pick(47, 30, 90), pick(48, 300, 900))),
        Case("two positions", make(pick(49, 0, 1), 2)),
    ]


def _offset_flat(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A design whose scores peak at the right key by too little (torch-only, no reference)."""
    c, s = 5.0, 15.0
    W_q = torch.tensor([[-s, c - s * offset], [-s, -c - s * offset]], dtype=torch.float64)
    W_k = torch.tensor([[s, 0.0], [s, 0.0]], dtype=torch.float64)
    return W_q, W_k, torch.tensor([1.0, -1.0], dtype=torch.float64)


_OFFSET_SLIPS = (
    Slip("the weights peak at the right key, but not by enough: on a long source the many "
         "other keys together take more than 1% of the weight", _offset_flat),
)


def _offset_diagnose(inputs: Mapping[str, Any], got: Any, expected: Any) -> str | None:
    if isinstance(got, dict) and not got.get(_OFFSET_KEYS[0], True):
        return ("return (W_q, W_k, v): W_q and W_k of shape (2, 2) (d_a = 2 hidden units, "
                "inputs (position, 1)), v of shape (2,), all finite")
    return None


# --------------------------------------------------------------------------------------------
# The registry, in notebook order
# --------------------------------------------------------------------------------------------

EXERCISES: dict[str, Exercise] = {ex.id: ex for ex in [
    Exercise(id="seq2seq.collision_loss", reference=seq2seq.collision_loss_bound,
             cases=_collision_cases, slips=_COLLISION_SLIPS),
    Exercise(id="seq2seq.greedy_decode", reference=decoding.greedy_decode,
             cases=_greedy_cases, slips=_GREEDY_SLIPS),
    Exercise(id="seq2seq.beam_search", reference=decoding.beam_search,
             cases=_beam_cases, slips=_BEAM_SLIPS, diagnose=_beam_diagnose),
    _BEAM_VS_GREEDY,
    Exercise(id="seq2seq.beam_cost", reference=decoding.beam_search_cost, cases=_cost_cases,
             slips=_COST_SLIPS, diagnose=_cost_diagnose),
    Exercise(id="seq2seq.masked_softmax", reference=attention.masked_softmax,
             cases=_softmax_cases, slips=_SOFTMAX_SLIPS, diagnose=_softmax_diagnose),
    Exercise(id="seq2seq.additive_score", reference=alignment.additive_score,
             cases=_additive_cases, slips=_ADDITIVE_SLIPS),
    Exercise(id="seq2seq.context_vector", reference=alignment.context_vector,
             cases=_context_cases, slips=_CONTEXT_SLIPS, diagnose=_context_diagnose),
    Exercise(id="seq2seq.attention_decoder_step", reference=seq2seq.attention_decoder_step,
             cases=_decoder_step_cases, slips=_DECODER_STEP_SLIPS,
             diagnose=_decoder_step_diagnose),
    _UNIFORM_ATTENTION,
    Exercise(id="seq2seq.offset_attention", reference=seq2seq.offset_attention,
             cases=_offset_cases, slips=_OFFSET_SLIPS, postprocess=offset_verdicts,
             diagnose=_offset_diagnose),
]}
