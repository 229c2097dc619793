r"""Speculative decoding: a small draft model proposes, the target verifies in one pass.

Taught in chapter 7 (the modern decoder), section 7. Leviathan et al. (2023), "Fast Inference
from Transformers via Speculative Decoding"; Chen et al. (2023), "Accelerating Large Language
Model Decoding with Speculative Sampling". The draft samples :math:`k` tokens
:math:`x_1..x_k` from its distributions :math:`q_i`; one forward pass of the target on the prefix
and the drafts gives its distributions :math:`p_1..p_{k+1}`. Draft :math:`x_i` is accepted with
probability :math:`\min(1, p_i(x_i) / q_i(x_i))`; at the first rejection the token is drawn from
the residual

.. math:: r(x) = \frac{\max(0,\, p_i(x) - q_i(x))}{\sum_{x'} \max(0,\, p_i(x') - q_i(x'))}

and the round ends; when all :math:`k` are accepted, a bonus token comes from :math:`p_{k+1}`.
Every emitted token is then distributed exactly as the target's: for any :math:`x`,
:math:`q(x)\min(1, p(x)/q(x)) + (1 - \sum_{x'} \min(p, q))\, r(x) = \min(p, q)(x) +
\max(0, p - q)(x) = p(x)`. A round costs one target pass and emits between 1 and :math:`k + 1`
tokens; with acceptance probability :math:`\alpha = \sum_x \min(p(x), q(x))` per draft the
expected number is :math:`(1 - \alpha^{k+1}) / (1 - \alpha)`.

Models are callables ``tokens (1, t) -> logits (1, t, V)`` (every position's next-token logits).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.checks import (
    check_finite,
    check_float_tensor,
    check_ids,
    check_int,
    check_positive,
    check_same_dtype,
)

LogitsFn = Callable[[torch.Tensor], torch.Tensor]


def _check_probabilities(name: str, t: torch.Tensor, ndim: int | None, shape: str) -> None:
    check_float_tensor(name, t, ndim=ndim, min_ndim=1, shape=shape)
    if bool((torch.isnan(t) | (t < 0) | (t > 1)).any()):
        raise ValueError(f"{name} must hold probabilities (in [0, 1], no NaN)")


def _check_generation(prompt: torch.Tensor, max_new_tokens: int, temperature: float,
                      greedy: bool, caller: str) -> None:
    check_ids("prompt", prompt, ndim=2, shape="(1, T)")
    if prompt.shape[0] != 1 or prompt.shape[1] == 0:
        raise ValueError(f"{caller} decodes one sequence: prompt must be (1, T) with T >= 1, got "
                         f"shape {tuple(prompt.shape)}")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if not greedy:
        check_positive("temperature", temperature)


def _check_logits_fn(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be a logits function (1, T) ids -> (1, T, V) logits, got "
                        f"{type(fn).__name__}")


def accept_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                u: torch.Tensor) -> tuple[int, torch.Tensor]:
    r"""The verification of one round: how many drafts are accepted, and the next token's law.

    Args:
        p: ``(k + 1, V)`` the target's probabilities at each draft position and after the last.
        q: ``(k, V)`` the draft's probabilities from which ``drafts`` were sampled.
        drafts: ``(k,)`` long, the proposed tokens.
        u: ``(k,)`` uniform numbers in ``[0, 1)``: draft ``i`` is accepted when
            :math:`u_i < p_i(x_i) / q_i(x_i)` (and every earlier one was).

    Returns:
        ``(n, dist)``: ``n`` accepted drafts (``0..k``) and the ``(V,)`` distribution of the token
        that follows them: the normalised residual :math:`\max(0, p_n - q_n)` after a rejection,
        :math:`p_k` when all were accepted.

    Example:
        >>> p = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
        >>> q = torch.tensor([[0.0, 1.0]])  # the draft always proposes token 1
        >>> accept_step(p, q, torch.tensor([1]), torch.tensor([0.3]))  # 0.3 < 0.5: accepted
        (1, tensor([0.9000, 0.1000]))
        >>> accept_step(p, q, torch.tensor([1]), torch.tensor([0.7]))  # rejected: residual
        (0, tensor([1., 0.]))
    """
    _check_probabilities("p", p, 2, "(k + 1, V)")
    _check_probabilities("q", q, 2, "(k, V)")
    check_ids("drafts", drafts, p.shape[1], ndim=1, shape="(k,)")
    check_float_tensor("u", u, ndim=1, shape="(k,)")
    if bool((torch.isnan(u) | (u < 0) | (u >= 1)).any()):
        raise ValueError(f"u must hold uniform numbers in [0, 1), got {u.tolist()}")
    k = drafts.shape[0]
    if p.shape[0] != k + 1 or q.shape[0] != k or u.shape != (k,):
        raise ValueError(f"need p (k+1, V), q (k, V), u (k,) for k = {k} drafts; got "
                         f"{tuple(p.shape)}, {tuple(q.shape)}, {tuple(u.shape)}")
    rows = torch.arange(k, device=p.device)
    drawn = q[rows, drafts]  # (k,): the draft's probability of each of its tokens
    if bool((drawn <= 0).any()):
        i = int((drawn <= 0).nonzero()[0, 0])
        raise ValueError(f"q gives drafts[{i}] = {int(drafts[i])} probability 0 at position "
                         f"{i}: a draft token must have been drawn from q")
    ratio = p[rows, drafts] / drawn  # (k,)
    rejected = (u >= ratio).nonzero()
    if rejected.numel() == 0:
        return k, p[k]
    n = int(rejected[0, 0])
    residual = (p[n] - q[n]).clamp(min=0)
    total = residual.sum()
    return n, residual / total if total > 0 else p[n]


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r""":math:`\alpha = \sum_x \min(p(x), q(x))` over the last axis: one draft's chance to be
    accepted.

    Example:
        >>> float(acceptance_probability(torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0])))
        0.5
    """
    _check_probabilities("p", p, None, "(..., V)")
    _check_probabilities("q", q, None, "(..., V)")
    check_same_dtype(p=p, q=q)
    if p.shape != q.shape:
        raise ValueError(f"p and q must be distributions of one shape (..., V), got "
                         f"{tuple(p.shape)} and {tuple(q.shape)}")
    return torch.minimum(p, q).sum(dim=-1)


def _check_alpha_k(alpha: float, k: int) -> float:
    a = check_finite("alpha", alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must be a probability in [0, 1], got {alpha}")
    check_int("k", k, minimum=0)
    return a


def expected_tokens_per_round(alpha: float, k: int) -> float:
    r"""Tokens one target pass yields on average: :math:`(1 - \alpha^{k+1}) / (1 - \alpha)`.

    Each of the ``k`` drafts is accepted with probability ``alpha`` (given the earlier ones
    were); the round ends at the first rejection and always adds one token of the target's
    (the residual's, or the bonus token), so it emits :math:`\sum_{i=0}^{k} \alpha^i` tokens.

    Example:
        >>> expected_tokens_per_round(0.0, 4), expected_tokens_per_round(1.0, 4)
        (1.0, 5.0)
    """
    a = _check_alpha_k(alpha, k)
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def expected_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    r"""Leviathan et al.'s Theorem 3.8: :math:`\frac{1 - \alpha^{k+1}}{(1 - \alpha)(k c + 1)}`.

    The expected speed-up over plain decoding when a draft call costs ``cost_ratio`` :math:`c`
    target calls and the target's pass over the ``k`` drafts costs what a pass over one token
    does: a round costs :math:`k c + 1` target calls and yields
    :func:`expected_tokens_per_round` tokens.

    Example:
        >>> expected_speedup(1.0, 4, 0.0), expected_speedup(0.0, 4, 0.25)
        (5.0, 0.5)
    """
    tokens = expected_tokens_per_round(alpha, k)
    c = check_finite("cost_ratio", cost_ratio)
    if c < 0:
        raise ValueError(f"cost_ratio must be >= 0 (a draft call's cost in target calls), got "
                         f"{cost_ratio}")
    return tokens / (k * c + 1)


def _probs(logits: torch.Tensor, temperature: float, greedy: bool) -> torch.Tensor:
    if greedy:  # the argmax as a one-hot distribution: the same rule then verifies greedily
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float64)
    return (logits.double() / temperature).softmax(-1)


@torch.no_grad()
def speculative_generate(target: LogitsFn, draft: LogitsFn, prompt: torch.Tensor,
                         max_new_tokens: int, k: int = 4, temperature: float = 1.0,
                         greedy: bool = False, generator: torch.Generator | None = None,
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    """Generate ``max_new_tokens`` after ``prompt`` ``(1, T)`` with drafts of ``k`` tokens.

    ``greedy=True`` verifies against the argmaxes (the output is the target's greedy output);
    otherwise it samples at ``temperature`` and the output has the target's distribution.

    Returns:
        ``(tokens (1, T + max_new_tokens), stats)`` with ``stats``: ``target_calls``,
        ``draft_calls``, ``proposed``, ``accepted`` and ``rejected`` drafts (the drafts after a
        rejection are proposed but never examined, so the acceptance rate of an examined draft is
        ``accepted / (accepted + rejected)``).

    Example:
        >>> table = torch.randn(5, 5)  # a bigram "model": logits from the last token
        >>> target = lambda t: table[t]
        >>> noise = torch.randn(5, generator=torch.Generator().manual_seed(1))
        >>> draft = lambda t: table[t] + 0.5 * noise
        >>> out, stats = speculative_generate(target, draft, torch.tensor([[0]]), 6, greedy=True)
        >>> seq = [0]
        >>> for _ in range(6):
        ...     seq.append(int(table[seq[-1]].argmax()))
        >>> out[0].tolist() == seq
        True
    """
    _check_generation(prompt, max_new_tokens, temperature, greedy, "speculative_generate")
    check_int("k", k, minimum=1)
    _check_logits_fn("target", target)
    _check_logits_fn("draft", draft)
    tokens = prompt
    stats = {"target_calls": 0, "draft_calls": 0, "proposed": 0, "accepted": 0, "rejected": 0}
    end = prompt.shape[1] + max_new_tokens
    while tokens.shape[1] < end:
        kk = min(k, end - tokens.shape[1] - 1)
        drafted, qs = tokens, []
        for _ in range(kk):  # the draft proposes kk tokens, one pass each
            q = _probs(draft(drafted)[0, -1], temperature, greedy)
            x = torch.multinomial(q, 1, generator=generator)
            qs.append(q)
            drafted = torch.cat([drafted, x.view(1, 1).to(tokens.dtype)], dim=1)
        stats["draft_calls"] += kk
        p = _probs(target(drafted)[0, tokens.shape[1] - 1:], temperature, greedy)  # (kk+1, V)
        if qs and qs[0].shape[-1] != p.shape[-1]:
            raise ValueError(f"the draft gives logits over {qs[0].shape[-1]} tokens and the "
                             f"target over {p.shape[-1]}: draft and target must share one "
                             "vocabulary")
        stats["target_calls"] += 1
        drafts = drafted[0, tokens.shape[1]:]
        u = torch.rand(kk, generator=generator, dtype=torch.float64, device=p.device)
        q_all = torch.stack(qs) if qs else p.new_zeros(0, p.shape[1])
        n, dist = accept_step(p, q_all, drafts, u)
        nxt = torch.multinomial(dist, 1, generator=generator).view(1, 1).to(tokens.dtype)
        tokens = torch.cat([tokens, drafts[:n].view(1, -1), nxt], dim=1)
        stats["proposed"] += kk
        stats["accepted"] += n
        stats["rejected"] += int(n < kk)
    return tokens, stats


@torch.no_grad()
def autoregressive_generate(model: LogitsFn, prompt: torch.Tensor, max_new_tokens: int,
                            temperature: float = 1.0, greedy: bool = False,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """Plain decoding, one model pass per token (what speculative decoding is timed against).

    Example:
        >>> table = torch.randn(5, 5)
        >>> autoregressive_generate(lambda t: table[t], torch.tensor([[0]]), 3, greedy=True).shape
        torch.Size([1, 4])
    """
    _check_generation(prompt, max_new_tokens, temperature, greedy, "autoregressive_generate")
    _check_logits_fn("model", model)
    tokens = prompt
    for _ in range(max_new_tokens):
        probs = _probs(model(tokens)[0, -1], temperature, greedy)
        nxt = torch.multinomial(probs, 1, generator=generator).view(1, 1).to(tokens.dtype)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens
