r"""Sampling from a language model: temperature, top-k, top-p (nucleus), seeded sampling steps.

Taught in chapter 4, section 5 (decoding). Each knob is a function from logits to logits (or to
the distribution they define), so that it can be plotted, tested and composed; :func:`sample_next`
draws one token per row from a seeded ``torch.Generator``; :func:`sample` runs the loop over the
course's ``step(tokens) -> logits`` interface (:mod:`course_lib.decoding`), like greedy and beam
search, so every model of the course samples the same way.

The order, as in most libraries: temperature, then top-k, then top-p, on the last dimension:

.. math:: p_T(v) \propto e^{z_v / T}, \qquad
          \mathcal V_k = \text{the } k \text{ largest } z_v, \qquad
          \mathcal V_p = \text{the smallest set of most probable tokens with }
          \textstyle\sum_{v \in \mathcal V_p} p(v) \ge p

(Holtzman et al., 2020, "The Curious Case of Neural Text Degeneration", for top-p; Fan et al.,
2018, for top-k). Filtered tokens get logit ``-inf`` (probability exactly zero).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.checks import (
    check_float_tensor,
    check_int,
    check_int_tensor,
    check_tensor,
    check_token_id,
)

StepFn = Callable[[torch.Tensor], torch.Tensor]


def _check_logits(logits: torch.Tensor) -> torch.Tensor:
    """Floating-point logits ``(..., V)`` with at least one token."""
    check_float_tensor("logits", logits, min_ndim=1, shape="(..., V)")
    if logits.shape[-1] == 0:
        raise ValueError(f"logits has an empty vocabulary dimension: shape {tuple(logits.shape)}")
    return logits


def _check_sampleable(logits: torch.Tensor) -> None:
    """Each row of logits defines a distribution: no NaN or +inf, not ``-inf`` everywhere."""
    if bool((torch.isnan(logits) | torch.isposinf(logits)).any()):
        raise ValueError("logits hold NaN or +inf: they define no distribution to sample from")
    dead = torch.isneginf(logits).all(dim=-1)  # (...,): rows that allow no token
    if bool(dead.any()):
        row = dead.nonzero()[0].tolist()
        where = f"row {row[0] if len(row) == 1 else tuple(row)} is" if row else "are"
        raise ValueError(f"logits {where} -inf everywhere: no token is allowed there")


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    r"""Divide the logits by :math:`T > 0`: :math:`T < 1` sharpens, :math:`T > 1` flattens.

    Example:
        >>> apply_temperature(torch.tensor([2.0, 1.0]), 0.5)
        tensor([4., 2.])
    """
    check_float_tensor("logits", logits, min_ndim=1, shape="(..., V)")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use temperature=0 in sample_next for greedy), "
                         f"got {temperature}")
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (and any tied with the ``k``-th); ``-inf``
    elsewhere.

    Ties with the ``k``-th largest value are kept, so the result never depends on how a sort
    orders equal values.

    Example:
        >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0, 0.0]), 2)
        tensor([-inf, 3., 2., -inf])
    """
    _check_logits(logits)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def _boundary_tolerance(logits: torch.Tensor) -> torch.Tensor:
    """How far below ``p`` a cumulative probability may be and still count as reaching ``p``.

    Two rounding errors move a mass that is exactly ``p`` in exact arithmetic: the float64 sum
    (at most about ``V`` units of float64 roundoff) and the rounding of the logits themselves to
    their dtype (a logit ``z`` is off by up to ``|z| eps / 2``, which moves a probability by a
    relative ``|z| eps``). Both are far below any real gap between candidate sets.
    """
    eps_in = torch.finfo(logits.dtype).eps
    finite = logits.masked_fill(~torch.isfinite(logits), 0.0).abs().amax(dim=-1, keepdim=True)
    sum_error = 4 * logits.shape[-1] * torch.finfo(torch.float64).eps
    return sum_error + 2 * eps_in * (1.0 + finite.double())  # (..., 1)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Nucleus filtering: keep the smallest set of most probable tokens whose probability
    reaches ``p``.

    Sorting the probabilities :math:`p_{(1)} \ge p_{(2)} \ge \dots`, token :math:`(i)` is kept
    exactly when the tokens ranked above it have not reached ``p`` yet:
    :math:`\sum_{j < i} p_{(j)} < p`. The most probable token is always kept.

    Computed so that rounding at the boundary can neither add nor drop a token: probabilities
    and their cumulative sums are taken in float64, and a cumulative mass within rounding error
    below ``p`` (:func:`_boundary_tolerance`) counts as having reached it. So probabilities
    ``(0.5, 0.3, 0.2)`` with ``p = 0.8`` keep two tokens whatever the dtype, although
    ``0.5 + 0.3`` may round below ``0.8``. Equal probabilities at the boundary are taken in
    vocabulary order (a stable sort).

    Args:
        logits: ``(..., V)``.
        p: in ``(0, 1]``; ``p = 1`` keeps every token.

    Returns:
        The logits, ``-inf`` outside the nucleus (same shape, dtype and device).

    Example:
        >>> logits = torch.tensor([0.5, 0.3, 0.2]).log()
        >>> top_p_filter(logits, 0.8).isfinite().tolist()   # exactly at the boundary: two
        [True, True, False]
        >>> top_p_filter(logits, 0.81).isfinite().tolist()  # past it: three
        [True, True, True]
    """
    _check_logits(logits)
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p == 1:
        return logits
    probs = torch.softmax(logits.double(), dim=-1)  # (..., V)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    mass_above = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    keep_sorted = mass_above < p - _boundary_tolerance(logits)  # (..., V), sorted order
    keep_sorted[..., 0] = True
    keep = torch.empty_like(keep_sorted).scatter_(-1, order, keep_sorted)  # vocabulary order
    return logits.masked_fill(~keep, float("-inf"))


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Temperature, then top-k, then top-p; ``None`` leaves a filter out.

    Example:
        >>> filter_logits(torch.tensor([1.0, 3.0, 2.0]), temperature=0.5, top_k=2)
        tensor([-inf, 6., 4.])
    """
    _check_logits(logits)
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


def filtered_distribution(logits: torch.Tensor, temperature: float = 1.0,
                          top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """The distribution :func:`sample_next` draws from: rows sum to one, zero where filtered.

    ``temperature=0`` is greedy decoding: all the mass on the first largest logit.

    Raises:
        ValueError: logits holding NaN or ``+inf``, or a row that is ``-inf`` everywhere (it
            allows no token: the softmax would be NaN).

    Example:
        >>> filtered_distribution(torch.tensor([0.0, 0.0, -100.0]), top_k=2)
        tensor([0.5000, 0.5000, 0.0000])
        >>> filtered_distribution(torch.tensor([1.0, 3.0, 2.0]), temperature=0)
        tensor([0., 1., 0.])
    """
    _check_logits(logits)
    _check_sampleable(logits)
    if temperature == 0:
        index = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, index, 1.0)
    return torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)


def sample_next(logits: torch.Tensor, generator: torch.Generator | None = None,
                temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None) -> torch.Tensor:
    """One sampling step: a token id per row, drawn from :func:`filtered_distribution`.

    Args:
        logits: ``(B, V)`` next-token logits.
        generator: a ``torch.Generator`` on the logits' device; the same seed gives the same
            tokens.
        temperature, top_k, top_p: see :func:`filter_logits`; ``temperature=0`` is greedy.

    Returns:
        ``(B,)`` long.

    Raises:
        ValueError: logits holding NaN or ``+inf``, or a row that is ``-inf`` everywhere.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sample_next(torch.tensor([[0.0, 9.0, 0.0]]), g, top_k=1).tolist()
        [1]
    """
    check_float_tensor("logits", logits, ndim=2, shape="(batch, vocab)")
    if temperature == 0:
        _check_logits(logits)
        _check_sampleable(logits)  # argmax would silently pick token 0 of a row of -inf
        return logits.argmax(dim=-1)
    probs = filtered_distribution(logits.float() if logits.dtype in (torch.float16,
                                                                     torch.bfloat16) else logits,
                                  temperature, top_k, top_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def sample(step: StepFn, prompt: torch.Tensor, max_new_tokens: int,
           generator: torch.Generator | None = None, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, eos_id: int | None = None,
           pad_id: int | None = None) -> torch.Tensor:
    """Sample continuations of ``prompt`` over the ``step(tokens) -> logits`` interface.

    Args:
        step: ``(B, t) -> (B, V)`` next-token logits (e.g. ``GPT.cached_step()``).
        prompt: ``(B, t0)`` long (``(t0,)`` is one sequence), ``t0 >= 1``.
        max_new_tokens: the most tokens to append.
        generator: seeds the draws (reproducible samples).
        temperature, top_k, top_p: see :func:`filter_logits`.
        eos_id: a row that samples it is finished; ``None``: never stop early.
        pad_id: written after a row's ``<eos>`` while other rows go on; default ``eos_id``.

    Returns:
        ``(B, t0 + n)`` long, ``n <= max_new_tokens`` (smaller only when every row finished).

    Example:
        >>> from course_lib.decoding import markov_step
        >>> step = markov_step(torch.tensor([[[0.0, 5.0], [5.0, 0.0]]]))  # 0 -> 1 -> 0 ...
        >>> sample(step, torch.tensor([[0]]), 4, temperature=0).tolist()
        [[0, 1, 0, 1, 0]]
    """
    check_tensor("prompt", prompt, shape="(B, t0)")
    tokens = prompt[None] if prompt.dim() == 1 else prompt
    if tokens.dtype != torch.long or tokens.dim() != 2 or tokens.shape[1] == 0:
        raise ValueError(f"prompt must be (B, t0) long with t0 >= 1, got {tokens.dtype} of shape "
                         f"{tuple(prompt.shape)}")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if eos_id is not None:
        check_int("eos_id", eos_id, minimum=0)
    finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for _ in range(max_new_tokens):
        logits = step(tokens)
        if logits.dim() != 2 or logits.shape[0] != tokens.shape[0]:
            raise ValueError(f"step must return (B, V) logits for B={tokens.shape[0]}, got shape "
                             f"{tuple(logits.shape)}")
        if eos_id is not None:
            check_token_id("eos_id", eos_id, logits.shape[1], vocabulary="the step's vocabulary")
        next_token = sample_next(logits, generator, temperature, top_k, top_p)  # (B,)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, eos_id if pad_id is None else pad_id)
            finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if eos_id is not None and bool(finished.all()):
            break
    return tokens


def distinct_ngrams(sequences: torch.Tensor | list[list[int]], n: int) -> float:
    """The fraction of distinct n-grams among all n-grams of the sequences (diversity,
    "distinct-n").

    Example:
        >>> distinct_ngrams([[1, 2, 1, 2, 1]], 2)  # (1,2), (2,1), (1,2), (2,1): 2 of 4
        0.5
    """
    check_int("n", n, minimum=1)
    if isinstance(sequences, torch.Tensor):
        check_int_tensor("sequences", sequences, ndim=2, shape="(batch, length)")
    rows = sequences.tolist() if isinstance(sequences, torch.Tensor) else sequences
    grams = [tuple(row[i:i + n]) for row in rows for i in range(len(row) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0
