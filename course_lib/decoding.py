r"""Decoding: greedy search and beam search over a ``step(tokens) -> logits`` callable.

Taught in chapter 1 (greedy vs beam search), reused by chapter 3 (the Transformer) and chapter 4
(language models). Every model of the course exposes the same interface, so these functions never
see the model:

``step(tokens)``: ``tokens`` is a ``(B, t)`` long tensor of prefixes (all rows the same length,
starting with ``<bos>`` or a prompt); it returns ``(B, V)`` logits of the next token. The decoders
normalise them with ``log_softmax``, so a step may return logits or log-probabilities.

A model factorises the probability of an output autoregressively,

.. math:: \log p(y \mid x) = \sum_{t=1}^{n} \log p(y_t \mid y_{<t}, x),

and decoding looks for the ``y`` that maximises it. Greedy search takes the most probable token at
each step; beam search keeps the ``k`` most probable prefixes. They differ because the argmax of a
product is not the product of the argmaxes: :func:`greedy_vs_beam_example` is a three-token
example, checkable by hand, in which greedy search returns a sequence of probability 0.225 and beam
search one of probability 0.36. A beam is not guaranteed to win, though: greedy's prefix can be
pruned from it, and :func:`beam_loses_to_greedy_example` is a model in which two beams return a
sequence of probability 0.105 and greedy search one of 0.14. :func:`sequence_log_prob` scores a
given output (teacher forcing), so the two searches can be compared on any model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.checks import check_float_tensor, check_ids, check_int, check_tensor, check_token_id

StepFn = Callable[[torch.Tensor], torch.Tensor]


def _check_prompt(prompt: torch.Tensor, name: str = "prompt") -> torch.Tensor:
    check_tensor(name, prompt, shape="(B, t0)")
    if prompt.dtype != torch.long:
        raise TypeError(f"{name} must hold long token ids, got {prompt.dtype}")
    if prompt.dim() == 1:
        prompt = prompt[None]  # (t0,) -> (1, t0)
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"{name} must be (B, t0) with t0 >= 1 (e.g. a <bos> column), got "
                         f"shape {tuple(prompt.shape)}")
    return prompt


def _check_eos(eos_id: int, log_probs: torch.Tensor) -> None:
    check_token_id("eos_id", eos_id, log_probs.shape[1], vocabulary="the step's vocabulary")


def _next_log_probs(step: StepFn, tokens: torch.Tensor) -> torch.Tensor:
    logits = step(tokens)
    if logits.dim() != 2 or logits.shape[0] != tokens.shape[0]:
        raise ValueError(f"step must return (B, V) logits for B={tokens.shape[0]} prefixes, got "
                         f"shape {tuple(logits.shape)}")
    return torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16)
                             else logits, dim=-1)


@torch.no_grad()
def greedy_decode(step: StepFn, prompt: torch.Tensor, max_new_tokens: int,
                  eos_id: int | None = None, pad_id: int | None = None) -> torch.Tensor:
    r"""Greedy search: append :math:`\hat y_t = \arg\max_v p(v \mid \hat y_{<t}, x)` until eos.

    Args:
        step: ``(B, t) -> (B, V)`` next-token logits.
        prompt: ``(B, t0)`` long, the start of every sequence (usually a ``<bos>`` column);
            ``(t0,)`` is read as one sequence.
        max_new_tokens: the most tokens to append.
        eos_id: the end token; a row that has produced it is finished. ``None``: never stop early.
        pad_id: written after a row's ``<eos>`` while other rows go on; default ``eos_id``.

    Returns:
        ``(B, t0 + n)`` long: the prompt and ``n <= max_new_tokens`` new tokens; ``n`` is smaller
        only when every row has produced ``<eos>``.

    Example:
        >>> step, bos, eos = greedy_vs_beam_example()
        >>> greedy_decode(step, torch.tensor([[bos]]), 5, eos).tolist()  # A A <eos>
        [[3, 1, 1, 0]]
    """
    tokens = _check_prompt(prompt)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if eos_id is not None:
        check_int("eos_id", eos_id, minimum=0)
    finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for _ in range(max_new_tokens):
        log_probs = _next_log_probs(step, tokens)  # (B, V)
        if eos_id is not None:
            _check_eos(eos_id, log_probs)
        next_token = log_probs.argmax(dim=-1)  # (B,)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, eos_id if pad_id is None else pad_id)
            finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, t + 1)
        if eos_id is not None and bool(finished.all()):
            break
    return tokens


@torch.no_grad()
def beam_search(step: StepFn, prompt: torch.Tensor, beam_width: int, max_new_tokens: int,
                eos_id: int, length_penalty: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Beam search for one sequence: keep the ``beam_width`` most probable prefixes at each step.

    The algorithm, step by step (exactly what the chapter's exercise asks for):

    1. The beam starts as the prompt alone, with score 0.
    2. At each of at most ``max_new_tokens`` steps, the candidates are every unfinished
       hypothesis extended by every token (score plus :math:`\log p(v \mid \text{prefix})`) and
       every finished hypothesis (one ending in ``<eos>``) unchanged. The ``beam_width``
       candidates of highest score form the new beam (ties: the order of ``torch.topk``).
    3. Stop early when every hypothesis of the beam is finished.
    4. Return the hypothesis of the final beam with the highest normalised score
       :math:`\log p(y \mid x) / n^{\alpha}`, where :math:`n` counts the new tokens (``<eos>``
       included) and :math:`\alpha` is ``length_penalty`` (0: no normalisation, the raw score).

    With ``beam_width=1`` this is greedy search; with a beam as wide as the number of possible
    sequences, it is exhaustive search.

    Args:
        step: ``(B, t) -> (B, V)`` next-token logits (``B`` is the number of live hypotheses).
        prompt: ``(1, t0)`` or ``(t0,)`` long, the start of the sequence.
        beam_width: ``k >= 1``, the number of hypotheses kept.
        max_new_tokens: the most tokens to append.
        eos_id: the end token.
        length_penalty: :math:`\alpha` of the final normalisation (Wu et al., 2016, use a
            variant of it); ranking during the search always uses the raw score.

    Returns:
        ``(tokens, score)``: ``tokens`` ``(t0 + n,)`` long, the prompt and the new tokens;
        ``score`` a 0-d tensor, the raw log-probability :math:`\sum_t \log p(y_t \mid y_{<t})`
        of the new tokens (not normalised), in the dtype of the step's log-probabilities.

    Example:
        >>> step, bos, eos = greedy_vs_beam_example()
        >>> tokens, score = beam_search(step, torch.tensor([bos]), 2, 5, eos)
        >>> tokens.tolist(), round(score.exp().item(), 2)  # B A <eos>, probability 0.4 * 0.9
        ([3, 2, 1, 0], 0.36)
    """
    prompt = _check_prompt(prompt)
    if prompt.shape[0] != 1:
        raise ValueError("beam_search decodes one sequence; prompt has batch size "
                         f"{prompt.shape[0]}")
    check_int("beam_width", beam_width, minimum=1)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    check_int("eos_id", eos_id, minimum=0)
    t0 = prompt.shape[1]
    beams = prompt  # (k, t), all rows the same length: finished rows are padded with <eos>
    scores: torch.Tensor | None = None  # (k,)
    finished = torch.zeros(1, dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        if bool(finished.all()) and scores is not None:
            break
        log_probs = _next_log_probs(step, beams)  # (k, V)
        _check_eos(eos_id, log_probs)  # an id past the vocabulary would index out of range
        if scores is None:
            scores = torch.zeros(beams.shape[0], dtype=log_probs.dtype, device=log_probs.device)
        vocab = log_probs.shape[1]
        cand = scores[:, None] + log_probs  # (k, V): every extension
        # A finished hypothesis stays as it is: one candidate (its own score), in column eos.
        stay = torch.full_like(cand, float("-inf"))
        stay[:, eos_id] = scores
        cand = torch.where(finished[:, None], stay, cand)
        flat = cand.reshape(-1)  # (k * V,)
        n_finite = int(torch.isfinite(flat).sum().clamp(min=1))  # never keep impossible ones
        top_scores, top_index = flat.topk(min(beam_width, n_finite))
        rows, tokens = top_index // vocab, top_index % vocab
        beams = torch.cat([beams[rows], tokens[:, None]], dim=1)  # (k', t + 1)
        finished = finished[rows] | (tokens == eos_id)
        scores = top_scores
    if scores is None:  # max_new_tokens == 0
        return prompt[0], torch.zeros((), dtype=torch.float32, device=prompt.device)
    # Length of each hypothesis: the new tokens up to and including its first <eos>.
    new = beams[:, t0:]
    is_eos = new == eos_id
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1),
                            torch.full_like(is_eos[:, 0], new.shape[1], dtype=torch.long))
    lengths = torch.where(is_eos.any(dim=1), first_eos + 1, first_eos).clamp(min=1)
    normalised = scores / lengths.to(scores.dtype) ** length_penalty
    best = int(normalised.argmax())
    return beams[best, :t0 + int(lengths[best])], scores[best]


def beam_search_cost(beam_width: int, vocab_size: int, max_new_tokens: int,
                     prompt_len: int) -> tuple[int, int, int]:
    r"""What :func:`beam_search` costs when no hypothesis finishes before ``max_new_tokens``.

    Before step :math:`t = 0, \dots, n - 1` the beam holds :math:`b_t = \min(k, V^t)`
    hypotheses of :math:`t_0 + t` tokens: the prompt has one continuation of each length,
    and a beam cannot hold more distinct prefixes than exist. Each is scored by the step
    function, and its :math:`V` extensions are the candidates. So

    .. math:: R = \sum_{t=0}^{n-1} b_t, \qquad
              T = \sum_{t=0}^{n-1} b_t\,(t_0 + t), \qquad
              C = V \max_t b_t = V \min(k, V^{n-1}).

    Args:
        beam_width: ``k >= 1``.
        vocab_size: ``V >= 1``, the size of the step's vocabulary (``<eos>`` included).
        max_new_tokens: ``n >= 0``, the number of search steps.
        prompt_len: ``t0 >= 1``, the tokens of the prompt.

    Returns:
        ``(R, T, C)``: the prefixes the step function scores over the whole search, the tokens
        those prefixes hold (what a step function that re-reads its prefix processes), and the
        most candidate scores held at one step (``(0, 0, 0)`` when ``n = 0``).

    Example:
        >>> beam_search_cost(beam_width=4, vocab_size=3, max_new_tokens=3, prompt_len=1)
        (8, 19, 12)
    """
    k = check_int("beam_width", beam_width, minimum=1)
    V = check_int("vocab_size", vocab_size, minimum=1)
    n = check_int("max_new_tokens", max_new_tokens, minimum=0)
    t0 = check_int("prompt_len", prompt_len, minimum=1)
    rows = tokens = widest = 0
    live, t = 1, 0  # b_0: the prompt alone
    while t < n and live < k and V > 1:  # the beam grows: at most log2(k) + 1 steps
        rows += live
        tokens += live * (t0 + t)
        widest = max(widest, live)
        live = min(k, live * V)  # never forms V^t: live stays at most k
        t += 1
    if t < n:  # from step t on the beam holds `live` hypotheses (k, or 1 when V = 1)
        steps = n - t
        rows += live * steps
        tokens += live * (steps * t0 + (t + n - 1) * steps // 2)  # sum of t0 + u, u = t..n-1
        widest = max(widest, live)
    return rows, tokens, widest * V


def markov_step(logits: torch.Tensor) -> StepFn:
    """A step function whose next-token logits depend on the position and the last token only.

    Args:
        logits: ``(P, V, V)``; ``logits[p, a, b]`` scores token ``b`` after a prefix of length
            ``p + 1`` that ends in ``a``. Prefixes longer than ``P`` use ``logits[P - 1]``.

    Returns:
        ``step(tokens (B, t)) -> (B, V)``: a tiny "model" for tests and hand-checked examples.
    """
    check_float_tensor("logits", logits, ndim=3, shape="(positions, V, V)")
    if logits.shape[1] != logits.shape[2]:
        raise ValueError(f"logits must be (positions, V, V), got shape {tuple(logits.shape)}")
    return MarkovStep(logits)


class MarkovStep:
    """The step function :func:`markov_step` returns: an object, so that it can be pickled (the
    grader hands hidden inputs holding one to its sandbox).

    Example:
        >>> step = MarkovStep(torch.eye(3).expand(2, 3, 3))
        >>> step(torch.tensor([[0, 2]])).tolist()
        [[0.0, 0.0, 1.0]]
    """

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        check_ids("tokens", tokens, self.logits.shape[-1], ndim=2, shape="(B, t)")
        if tokens.shape[1] == 0:
            raise ValueError(f"tokens must hold at least one token per row, got shape "
                             f"{tuple(tokens.shape)}")
        position = min(tokens.shape[1], self.logits.shape[0]) - 1
        return self.logits[position][tokens[:, -1]]


def greedy_vs_beam_example() -> tuple[StepFn, int, int]:
    r"""A three-token model in which greedy search misses the most probable sequence.

    Tokens: ``0 = <eos>``, ``1 = A``, ``2 = B``, ``3 = <bos>``. The probabilities:

    ============  ==========  ==========  =============
    after         p(A)        p(B)        p(<eos>)
    ============  ==========  ==========  =============
    ``<bos>``     0.5         0.4         0.1
    ``<bos> A``   0.45        0.35        0.2
    ``<bos> B``   0.9         0.05        0.05
    two tokens    0           0           1
    ============  ==========  ==========  =============

    Greedy takes A (0.5), then A (0.45): :math:`p(AA) = 0.225`. Beam search with two beams keeps
    A and B after the first step and finds :math:`p(BA) = 0.4 \times 0.9 = 0.36`: the best first
    token is not the first token of the best sequence.

    Returns:
        ``(step, bos_id, eos_id)``.
    """
    probs = torch.zeros(3, 4, 4, dtype=torch.float64)  # (position, last token, next token)
    probs[0, 3] = torch.tensor([0.1, 0.5, 0.4, 0.0], dtype=torch.float64)  # after <bos>
    probs[1, 1] = torch.tensor([0.2, 0.45, 0.35, 0.0], dtype=torch.float64)  # after <bos> A
    probs[1, 2] = torch.tensor([0.05, 0.9, 0.05, 0.0], dtype=torch.float64)  # after <bos> B
    probs[2, :, 0] = 1.0  # after two tokens: <eos>
    probs[0, :3, 0] = probs[1, [0, 3], 0] = 1.0  # unreachable rows: any distribution will do
    return markov_step(probs.log()), 3, 0


@torch.no_grad()
def sequence_log_prob(step: StepFn, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    r"""The log-probability a model gives the tokens after the prompt: teacher-forced scoring.

    .. math:: \log p(y_{t_0:} \mid y_{<t_0}) = \sum_{t \ge t_0} \log p(y_t \mid y_{<t})

    Args:
        step: ``(B, t) -> (B, V)`` next-token logits.
        tokens: ``(t0 + n,)`` or ``(1, t0 + n)`` long, the prompt followed by the new tokens.
        prompt_len: ``t0 >= 1``, the number of prompt tokens (they are not scored).

    Returns:
        A 0-d tensor, the sum of the new tokens' log-probabilities (the ``score`` that
        :func:`beam_search` returns for its tokens).

    Example:
        >>> step, bos, eos = greedy_vs_beam_example()
        >>> round(sequence_log_prob(step, torch.tensor([bos, 2, 1, eos]), 1).exp().item(), 2)
        0.36
    """
    tokens = _check_prompt(tokens, "tokens")
    if tokens.shape[0] != 1:
        raise ValueError(f"sequence_log_prob scores one sequence; got batch size {tokens.shape[0]}")
    if not 1 <= prompt_len <= tokens.shape[1]:
        raise ValueError(f"prompt_len must lie between 1 and the sequence length "
                         f"{tokens.shape[1]}, got {prompt_len}")
    total = torch.zeros((), dtype=torch.float64, device=tokens.device)
    for t in range(prompt_len, tokens.shape[1]):
        log_probs = _next_log_probs(step, tokens[:, :t])  # (1, V)
        total = total.to(log_probs.dtype) + log_probs[0, tokens[0, t]]
    return total


def beam_loses_to_greedy_example() -> tuple[StepFn, int, int]:
    r"""A model in which beam search with two beams returns a *less* probable sequence than greedy.

    Tokens: ``0 = <eos>``, ``1 = A``, ``2 = B``, ``3 = C``, ``4 = D``, ``5 = <bos>``. The
    probabilities (a row not listed, unreachable or after three tokens, ends with ``<eos>``):

    ==============  ============================================
    after           next token
    ==============  ============================================
    ``<bos>``       A 0.4, B 0.35, D 0.25
    ``<bos> A``     D 0.35, <eos> 0.33, B 0.32
    ``<bos> B``     C 0.5, B 0.45, <eos> 0.05
    ``<bos> D``     A 0.52, <eos> 0.48
    ``<bos> A D``   <eos> 1
    ``<bos> B C``   A 0.6, <eos> 0.4
    ``<bos> B B``   A 0.6, <eos> 0.4
    ==============  ============================================

    Greedy writes A D <eos>, :math:`p = 0.4 \times 0.35 = 0.14` (the most probable sequence of
    all). Two beams keep A and B after one step; after two, BC (0.175) and BB (0.1575) both beat
    AD (0.14), so greedy's prefix is pruned, and the beam ends with B C A <eos>,
    :math:`p = 0.175 \times 0.6 = 0.105`. Three beams keep AD and find 0.14 again.

    Returns:
        ``(step, bos_id, eos_id)``.
    """
    eos, A, B, C, D, bos = range(6)
    probs = torch.zeros(4, 6, 6, dtype=torch.float64)  # (position, last token, next token)
    probs[:, :, eos] = 1.0  # by default: end
    probs[0, bos] = torch.tensor([0.0, 0.4, 0.35, 0.0, 0.25, 0.0], dtype=torch.float64)
    probs[1, A] = torch.tensor([0.33, 0.0, 0.32, 0.0, 0.35, 0.0], dtype=torch.float64)
    probs[1, B] = torch.tensor([0.05, 0.0, 0.45, 0.5, 0.0, 0.0], dtype=torch.float64)
    probs[1, D] = torch.tensor([0.48, 0.52, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    probs[2, C] = probs[2, B] = torch.tensor([0.4, 0.6, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    return markov_step(probs.log()), bos, eos
