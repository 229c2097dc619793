"""Tests of course_lib.decoding: greedy and beam search over step functions."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from course_lib import decoding
from course_lib.decoding import beam_search, greedy_decode, greedy_vs_beam_example, markov_step

EOS, BOS = 0, 1


def random_scorer(seed: int, vocab: int = 4, positions: int = 4,
                  dtype: torch.dtype = torch.float64):
    g = torch.Generator().manual_seed(seed)
    return markov_step(torch.randn(positions, vocab, vocab, generator=g, dtype=dtype) * 2)


def sequence_log_prob(step, tokens: list[int], t0: int = 1) -> float:
    """log p of tokens[t0:] given tokens[:t0], computed one token at a time."""
    total = 0.0
    for t in range(t0, len(tokens)):
        logp = torch.log_softmax(step(torch.tensor([tokens[:t]])), -1)
        total += float(logp[0, tokens[t]])
    return total


def brute_force_best(step, vocab: int, max_new: int) -> tuple[list[int], float]:
    """The most probable sequence among all that end in <eos> or reach max_new tokens."""
    best, best_score = None, -math.inf
    for n in range(1, max_new + 1):
        for body in itertools.product(range(vocab), repeat=n):
            if EOS in body[:-1]:
                continue
            if body[-1] != EOS and n < max_new:
                continue
            seq = [BOS, *body]
            score = sequence_log_prob(step, seq)
            if score > best_score:
                best, best_score = seq, score
    return best, best_score


# Known answers ------------------------------------------------------------------------------

def test_hand_checked_example_greedy_differs_from_beam() -> None:
    step, bos, eos = greedy_vs_beam_example()
    greedy = greedy_decode(step, torch.tensor([[bos]]), 5, eos)
    assert greedy.tolist() == [[3, 1, 1, 0]]  # A A <eos>
    assert math.isclose(math.exp(sequence_log_prob(step, greedy[0].tolist())), 0.5 * 0.45,
                        rel_tol=1e-12)
    tokens, score = beam_search(step, torch.tensor([[bos]]), 2, 5, eos)
    assert tokens.tolist() == [3, 2, 1, 0]  # B A <eos>
    assert math.isclose(score.exp().item(), 0.4 * 0.9)


def test_hand_checked_example_beam_loses_to_greedy() -> None:
    """Two beams prune greedy's prefix (0.175 and 0.1575 beat 0.14) and end at 0.105."""
    step, bos, eos = decoding.beam_loses_to_greedy_example()
    greedy = greedy_decode(step, torch.tensor([[bos]]), 5, eos)[0]
    assert greedy.tolist() == [bos, 1, 4, eos]  # A D <eos>
    assert math.isclose(math.exp(sequence_log_prob(step, greedy.tolist())), 0.4 * 0.35)
    tokens, score = beam_search(step, torch.tensor([bos]), 2, 5, eos)
    assert tokens.tolist() == [bos, 2, 3, 1, eos]  # B C A <eos>
    assert math.isclose(score.exp().item(), 0.35 * 0.5 * 0.6)
    tokens, score = beam_search(step, torch.tensor([bos]), 3, 5, eos)
    assert tokens.tolist() == greedy.tolist() and math.isclose(score.exp().item(), 0.14)
    # Greedy's output is the most probable finished sequence of all (brute force).
    best = max(math.exp(sequence_log_prob(step, [bos, *body]))
               for n in range(1, 5) for body in itertools.product(range(6), repeat=n)
               if body[-1] == eos and eos not in body[:-1])
    assert math.isclose(best, 0.14)
    # Every reachable row is a distribution.
    for prefix in ([bos], [bos, 1], [bos, 2], [bos, 4], [bos, 1, 4], [bos, 2, 3], [bos, 2, 2]):
        probs = torch.softmax(step(torch.tensor([prefix])), -1)
        assert math.isclose(probs.sum().item(), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_sequence_log_prob_is_the_beam_score_and_the_teacher_forced_sum(seed: int) -> None:
    step = random_scorer(seed, vocab=5, dtype=torch.float32)
    tokens, score = beam_search(step, torch.tensor([BOS, 3]), 3, 6, EOS)
    ours = decoding.sequence_log_prob(step, tokens, 2)
    assert ours.shape == () and ours.dtype == torch.float32
    torch.testing.assert_close(ours, score)
    assert math.isclose(ours.item(), sequence_log_prob(step, tokens.tolist(), t0=2), rel_tol=1e-5)
    assert decoding.sequence_log_prob(step, tokens[None], len(tokens)).item() == 0.0  # nothing new
    with pytest.raises(ValueError, match="prompt_len"):
        decoding.sequence_log_prob(step, tokens, 0)
    with pytest.raises(ValueError, match="one sequence"):
        decoding.sequence_log_prob(step, torch.stack([tokens, tokens]), 1)


def test_greedy_pads_finished_rows_and_stops_when_all_done() -> None:
    # Row 0 ends at once (<eos> after <bos> is likely), row 1 never: built from a scorer table.
    logits = torch.full((1, 3, 3), -10.0)
    logits[0, 1, 0] = 5.0  # after <bos> (id 1): <eos>
    logits[0, 2, 2] = 5.0  # after token 2: token 2 again
    logits[0, 0, 2] = 5.0  # after <eos>: would say 2, but the row is finished
    step = markov_step(logits)
    out = greedy_decode(step, torch.tensor([[1], [2]]), 3, eos_id=0, pad_id=1)
    assert out.tolist() == [[1, 0, 1, 1], [2, 2, 2, 2]]
    done = greedy_decode(step, torch.tensor([[1], [1]]), 5, eos_id=0)
    assert done.tolist() == [[1, 0], [1, 0]]  # stopped early
    assert greedy_decode(step, torch.tensor([[2]]), 3).shape == (1, 4)  # no eos: full length


# Properties ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_beam_width_one_is_greedy(seed: int) -> None:
    step = random_scorer(seed)
    greedy = greedy_decode(step, torch.tensor([[BOS]]), 6, EOS)[0]
    tokens, score = beam_search(step, torch.tensor([BOS]), 1, 6, EOS)
    assert tokens.tolist() == greedy.tolist()
    assert math.isclose(score.item(), sequence_log_prob(step, tokens.tolist()), rel_tol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_wide_beam_finds_the_best_sequence_by_brute_force(seed: int) -> None:
    vocab, max_new = 4, 4
    step = random_scorer(seed, vocab)
    best, best_score = brute_force_best(step, vocab, max_new)
    tokens, score = beam_search(step, torch.tensor([BOS]), vocab ** max_new, max_new, EOS)
    assert tokens.tolist() == best
    assert math.isclose(score.item(), best_score, rel_tol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_beam_score_is_the_log_prob_of_its_tokens(seed: int) -> None:
    step = random_scorer(seed, vocab=5, dtype=torch.float32)
    for k in (2, 3):
        tokens, score = beam_search(step, torch.tensor([BOS]), k, 7, EOS, length_penalty=0.7)
        assert score.dtype == torch.float32
        assert math.isclose(score.item(), sequence_log_prob(step, tokens.tolist()), rel_tol=1e-5)
        assert tokens[0] == BOS and (EOS not in tokens[1:-1].tolist())


def test_length_penalty_prefers_longer_sequences() -> None:
    # <eos> costs little right away; a long sequence is slightly less likely per token.
    # After <bos>: <eos> or token 2, each with p = 0.5. After 2: 2 again (0.9) or <eos> (0.1).
    # Raw scores favour stopping at once (log 0.5); per token, six 2s are better.
    logits = torch.zeros(8, 3, 3)
    logits[0, BOS] = torch.tensor([0.0, -30.0, 0.0])
    logits[1:, 2] = torch.tensor([math.log(0.1), -30.0, math.log(0.9)])
    step = markov_step(logits)
    short, _ = beam_search(step, torch.tensor([BOS]), 3, 6, EOS, length_penalty=0.0)
    long, _ = beam_search(step, torch.tensor([BOS]), 3, 6, EOS, length_penalty=1.0)
    assert short.tolist() == [BOS, EOS]
    assert long.tolist() == [BOS] + [2] * 6


def test_bad_inputs_are_named() -> None:
    step = random_scorer(0)
    with pytest.raises(ValueError, match="one sequence"):
        beam_search(step, torch.tensor([[BOS], [BOS]]), 2, 3, EOS)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(step, torch.tensor([BOS]), 0, 3, EOS)
    with pytest.raises(TypeError, match="long"):
        greedy_decode(step, torch.tensor([[1.0]]), 3, EOS)
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        greedy_decode(lambda t: torch.zeros(5, 3), torch.tensor([[BOS]]), 3, EOS)


class _Counting:
    """Counts the prefixes, tokens and finite candidate scores a search asks of a step."""

    def __init__(self, step: decoding.StepFn) -> None:
        self.step, self.prefixes, self.tokens, self.candidates = step, 0, 0, 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.step(tokens)
        self.prefixes += tokens.shape[0]
        self.tokens += tokens.numel()
        self.candidates = max(self.candidates, int(torch.isfinite(logits).sum()))
        return logits


@pytest.mark.parametrize("k, V, n, t0", [(1, 5, 6, 1), (2, 3, 3, 1), (3, 5, 6, 2), (4, 3, 6, 2),
                                         (9, 2, 3, 1), (40, 3, 4, 1), (200, 3, 4, 3),
                                         (5, 2, 1, 4), (3, 4, 0, 2)])
def test_beam_search_cost_is_what_beam_search_asks_of_its_step(k: int, V: int, n: int,
                                                               t0: int) -> None:
    """The derived counts against a measurement: token V is an <eos> of probability zero, so no
    hypothesis ends before max_new_tokens."""
    logits = torch.randn(8, V + 1, V + 1, generator=torch.Generator().manual_seed(k),
                         dtype=torch.float64)
    logits[..., V] = float("-inf")
    counter = _Counting(markov_step(logits))
    beam_search(counter, torch.zeros(1, t0, dtype=torch.long), k, n, V)
    assert (counter.prefixes, counter.tokens, counter.candidates) == \
        decoding.beam_search_cost(k, V, n, t0)


def test_beam_search_cost_by_hand_and_at_scale() -> None:
    # k = 2, V = 3, n = 3, t0 = 1: beams of 1, 2, 2 prefixes of 1, 2, 3 tokens.
    assert decoding.beam_search_cost(2, 3, 3, 1) == (5, 1 + 4 + 6, 6)
    # A GPT-2-sized vocabulary: no V^t is ever formed; greedy scores one prefix per step.
    assert decoding.beam_search_cost(4, 50257, 1000, 1)[0] == 1 + 4 * 999
    assert decoding.beam_search_cost(1, 50257, 7, 2) == (7, sum(2 + t for t in range(7)), 50257)
    with pytest.raises(ValueError, match="beam_width"):
        decoding.beam_search_cost(0, 3, 3, 1)
    with pytest.raises(TypeError, match="vocab_size"):
        decoding.beam_search_cost(2, 3.0, 3, 1)  # type: ignore[arg-type]
