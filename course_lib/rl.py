r"""Reinforcement learning with verifiable rewards: rollouts, advantages, the GRPO loss, training.

Taught in chapter 9 (reasoning), sections 3 and 4. A policy (a :class:`course_lib.gpt.GPT`)
samples a *group* of :math:`G` completions for each prompt (:func:`rollouts`), a verifier scores
each (:mod:`course_lib.reasoning`), and the policy's log-probabilities of its own tokens are
pushed up where the reward beat the group's and down where it fell short.

* REINFORCE with a baseline: :math:`\nabla J = \mathbb E[(r - b)\,\nabla \log \pi(y|x)]`; the
  leave-one-out baseline (:func:`rloo_advantages`) is the mean reward of the *other* samples.
* GRPO (Shao et al., 2024): the advantage of sample :math:`i` of a group is its reward
  normalised by the group's mean and standard deviation (:func:`group_advantages`); the loss
  (:func:`grpo_loss`) clips the importance ratio :math:`\rho = \pi_\theta / \pi_{\text{old}}` as
  PPO does and adds :math:`\beta` times the k3 estimate of the KL divergence to a frozen
  reference (:func:`k3_kl`), averaged over tokens or over sequences.

:func:`train_grpo` is the loop; ``scripts/train_reasoning.py`` runs it on seeds and ships the
curves that the chapter plots.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from course_lib import gpt, reasoning, sampling
from course_lib.checks import (
    check_bool_tensor,
    check_finite,
    check_finite_tensor,
    check_float_tensor,
    check_ids,
    check_int,
    check_positive,
    check_same_dtype,
    check_sequence,
)

END_ID = reasoning.VOCAB.index(reasoning.END)


# -- advantages --------------------------------------------------------------------------------


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    r"""GRPO's advantages: each reward minus its group's mean, over the group's standard deviation.

    .. math:: A_{p,i} = \frac{r_{p,i} - \operatorname{mean}_j r_{p,j}}{\operatorname{std}_j r_{p,j}}

    with the sample standard deviation (``torch.std``'s default, :math:`G - 1` below). A group
    whose rewards are all equal (all right or all wrong) teaches nothing: its advantages are 0,
    never 0/0.

    Args:
        rewards: ``(P, G)``: ``G`` samples for each of ``P`` prompts, float.

    Returns:
        ``(P, G)`` in the rewards' dtype.

    Example:
        >>> group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
        tensor([[ 0.8660, -0.8660, -0.8660,  0.8660],
                [ 0.0000,  0.0000,  0.0000,  0.0000]])
    """
    if check_float_tensor("rewards", rewards).dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (prompts, group) with a group of at least 2, got "
                         f"shape {tuple(rewards.shape)}")
    check_finite_tensor("rewards", rewards)  # one NaN would silently zero its group
    centred = rewards - rewards.mean(1, keepdim=True)
    std = rewards.std(1, keepdim=True)
    return torch.where(std > 0, centred / torch.where(std > 0, std, 1.0), 0.0)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    r"""REINFORCE leave-one-out: each reward minus the mean of the *other* rewards of its group.

    .. math:: A_{p,i} = r_{p,i} - \frac{1}{G-1}\sum_{j \ne i} r_{p,j}
              = \frac{G}{G-1}\left(r_{p,i} - \operatorname{mean}_j r_{p,j}\right)

    The baseline does not depend on sample :math:`i`, so the gradient stays unbiased.

    Example:
        >>> rloo_advantages(torch.tensor([[1.0, 0.0, 0.0]]))
        tensor([[ 1.0000, -0.5000, -0.5000]])
    """
    if check_float_tensor("rewards", rewards).dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (prompts, group) with a group of at least 2, got "
                         f"shape {tuple(rewards.shape)}")
    check_finite_tensor("rewards", rewards)
    g = rewards.shape[1]
    return (rewards - rewards.mean(1, keepdim=True)) * (g / (g - 1))


def centred_advantages(rewards: torch.Tensor) -> torch.Tensor:
    r"""Each reward minus its group's mean, not divided by the standard deviation (Dr. GRPO).

    Liu et al. (2025) drop GRPO's division by the group's standard deviation, which weighs the
    groups whose rewards vary little (questions nearly always or nearly never solved) more.

    Example:
        >>> centred_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]]))
        tensor([[ 0.5000, -0.5000, -0.5000,  0.5000],
                [ 0.2500,  0.2500,  0.2500, -0.7500]])
    """
    if check_float_tensor("rewards", rewards).dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (prompts, group) with a group of at least 2, got "
                         f"shape {tuple(rewards.shape)}")
    check_finite_tensor("rewards", rewards)
    return rewards - rewards.mean(1, keepdim=True)


ADVANTAGES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "group": group_advantages, "rloo": rloo_advantages, "centred": centred_advantages}


# -- a verifier with a loophole (section 3) ----------------------------------------------------


def lenient_reward(completion: str, answer: int) -> float:
    """A flawed verifier: 0.0 when the completion's final answer is wrong, 1.0 otherwise.

    It checks for a wrong answer instead of for the right one, so a completion with no answer
    at all (:func:`course_lib.reasoning.final_answer` is None: ``"."``, ``",."``) passes.
    Section 3 trains a policy on it.

    Example:
        >>> lenient_reward("9,7,8.", 8), lenient_reward("9,7,7.", 8), lenient_reward(".", 8)
        (1.0, 0.0, 1.0)
    """
    check_int("answer", answer)
    found = reasoning.final_answer(completion)  # refuses a completion that is not a string
    return float(found is None or found == answer)


#: The rewards :class:`GRPOConfig` can name: the verifiers of :mod:`course_lib.reasoning` and
#: the flawed one above.
REWARDS: dict[str, Callable[[str, int], float]] = {**reasoning.REWARDS,
                                                   "lenient": lenient_reward}


# -- the loss ----------------------------------------------------------------------------------


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    r"""Schulman's k3 estimate of :math:`\mathrm{KL}(\pi_\theta \| \pi_{\text{ref}})` per token.

    .. math:: k_3 = \frac{\pi_{\text{ref}}}{\pi_\theta}
              - \log\frac{\pi_{\text{ref}}}{\pi_\theta} - 1
              \;\ge 0

    Unbiased for tokens sampled from :math:`\pi_\theta`, and never negative.

    Example:
        >>> k3_kl(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -1.0]))
        tensor([0.0000, 0.7183])
    """
    check_float_tensor("logp", logp)
    check_float_tensor("logp_ref", logp_ref)
    check_same_dtype(logp=logp, logp_ref=logp_ref)
    if logp.shape != logp_ref.shape:
        raise ValueError(f"logp and logp_ref must have the same shape, got {tuple(logp.shape)} "
                         f"and {tuple(logp_ref.shape)}")
    d = logp_ref - logp
    return d.exp() - d - 1


def kl_gradients(logits: torch.Tensor, ref_logits: torch.Tensor,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Two gradients with respect to the logits of one token's distribution :math:`\pi`.

    ``exact``: the gradient of :math:`\mathrm{KL}(\pi \| \pi_{\text{ref}})
    = \sum_y \pi_y \log(\pi_y / \pi_{\text{ref},y})`,
    :math:`\pi_y\,(\log\pi_y - \log\pi_{\text{ref},y} - \mathrm{KL})`.

    ``k3``: the expected gradient of the k3 term used as a loss, as GRPO's loss uses it: a
    token :math:`y \sim \pi` is sampled, :math:`k_3(y)` is differentiated at that token (the
    sampling is not), and the gradient is averaged over :math:`y`:

    .. math:: \mathbb E_{y \sim \pi}\bigl[(1 - \pi_{\text{ref},y}/\pi_y)
              \nabla \log \pi_y\bigr] = \pi - \pi_{\text{ref}}
              = \nabla\, \mathrm{KL}(\pi_{\text{ref}} \| \pi),

    the gradient of the *other* KL divergence, not of the one whose value k3 estimates.

    Args:
        logits, ref_logits: ``(..., V)`` float, the same shape and dtype.

    Returns:
        ``(exact, k3)``, each ``(..., V)``.

    Example:
        >>> exact, k3 = kl_gradients(torch.tensor([0.0, 0.0]), torch.tensor([0.0, 1.0]))
        >>> exact, k3
        (tensor([ 0.2500, -0.2500]), tensor([ 0.2311, -0.2311]))
    """
    check_float_tensor("logits", logits, min_ndim=1, shape="(..., V)")
    check_float_tensor("ref_logits", ref_logits, min_ndim=1, shape="(..., V)")
    check_same_dtype(logits=logits, ref_logits=ref_logits)
    if logits.shape != ref_logits.shape:
        raise ValueError(f"logits and ref_logits must have the same shape, got "
                         f"{tuple(logits.shape)} and {tuple(ref_logits.shape)}")
    check_finite_tensor("logits", logits)
    check_finite_tensor("ref_logits", ref_logits)
    logp, logq = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    p = logp.exp()
    kl = (p * (logp - logq)).sum(-1, keepdim=True)
    return p * (logp - logq - kl), p - logq.exp()


def _check_sequences(name: str, tokens: torch.Tensor, vocab_size: int,
                     prompt_length: int | None = None) -> None:
    """``tokens`` ``(B, T)`` ids of the vocabulary; a prompt of ``1 <= prompt_length < T``."""
    check_ids(name, tokens, vocab_size, ndim=2, shape="(B, T)")
    if prompt_length is not None and not 1 <= check_int("prompt_length", prompt_length) < \
            tokens.shape[1]:
        raise ValueError(f"prompt_length must lie in [1, {tokens.shape[1]}) for {name} of shape "
                         f"{tuple(tokens.shape)}, got {prompt_length}")


def grpo_loss(logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float | None = 0.2,
              beta: float = 0.04, level: Literal["token", "sequence"] = "token") -> torch.Tensor:
    r"""The GRPO loss (to minimise) of a batch of sampled completions.

    Per response token :math:`t` of sequence :math:`b`, with
    :math:`\rho = \exp(\log\pi_\theta - \log\pi_{\text{old}})`:

    .. math:: \ell_{b,t} = -\min\!\left(\rho A_b,\;
              \operatorname{clip}(\rho, 1-\epsilon, 1+\epsilon) A_b\right)
              + \beta\, k_3(\pi_\theta, \pi_{\text{ref}})_{b,t}

    ``level="token"`` averages over every response token of the batch (each token weighs the
    same: DAPO's choice); ``"sequence"`` averages each sequence's tokens, then the sequences
    (DeepSeekMath's: a long response's tokens weigh less each). With :math:`\rho = 1` and
    :math:`\beta = 0` its gradient is REINFORCE's, :math:`-A_b \nabla \log \pi_\theta` per token.

    Args:
        logp: ``(B, N)`` log-probabilities of the sampled tokens under the policy (with grad).
        logp_old: ``(B, N)`` the same under the policy that sampled them (no grad).
        logp_ref: ``(B, N)`` the same under the frozen reference.
        advantages: ``(B,)`` one advantage per sequence.
        mask: ``(B, N)`` bool, True at response tokens (False after the end).
        clip_eps, beta: :math:`\epsilon` and :math:`\beta`; ``clip_eps=None`` does not clip
            (the objective is then :math:`\rho A`, an ablation).

    Returns:
        A 0-d tensor.

    Example:
        >>> lp = torch.zeros(1, 2)
        >>> grpo_loss(lp, lp, lp, torch.tensor([2.0]), torch.tensor([[True, False]]))
        tensor(-2.)
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    named = {"logp": logp, "logp_old": logp_old, "logp_ref": logp_ref, "advantages": advantages}
    for name, t in named.items():
        check_float_tensor(name, t)
    check_same_dtype(**named)
    check_bool_tensor("mask", mask, shape="(B, N)")
    if clip_eps is not None and not 0 <= check_finite("clip_eps", clip_eps) < 1:
        raise ValueError(f"clip_eps must lie in [0, 1) (or be None: no clipping), got {clip_eps}")
    if check_finite("beta", beta) < 0:
        raise ValueError(f"beta must be at least 0 (a weight on a penalty), got {beta}")
    if not (logp.shape == logp_old.shape == logp_ref.shape == mask.shape and logp.dim() == 2
            and advantages.shape == logp.shape[:1]):
        raise ValueError(f"logp, logp_old, logp_ref and mask must be (B, N) and advantages (B,); "
                         f"got {tuple(logp.shape)}, {tuple(logp_old.shape)}, "
                         f"{tuple(logp_ref.shape)}, {tuple(mask.shape)} and "
                         f"{tuple(advantages.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool, got {mask.dtype}")
    ratio = (logp - logp_old).exp()
    a = advantages[:, None]
    surrogate = (ratio * a if clip_eps is None else
                 torch.minimum(ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a))
    per_token = -surrogate + beta * k3_kl(logp, logp_ref)
    m = mask.to(per_token.dtype)
    if not bool(mask.any()):
        raise ValueError("mask marks no response token: the mean loss over none is 0/0")
    if level == "token":
        return (per_token * m).sum() / m.sum()
    return ((per_token * m).sum(1) / m.sum(1).clamp(min=1)).mean()


# -- rollouts ----------------------------------------------------------------------------------


def response_mask(tokens: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """``(B, N)``: True at the response's tokens up to and including its first ``.``.

    Example:
        >>> t = torch.tensor([reasoning.encode("7+1=8...")])
        >>> response_mask(t, 4).int().tolist()
        [[1, 1, 0, 0]]
    """
    _check_sequences("tokens", tokens, len(reasoning.VOCAB), prompt_length)
    response = tokens[:, prompt_length:]
    ended = (response == END_ID).long().cumsum(1)
    return (ended == 0) | ((ended == 1) & (response == END_ID))


def token_logprobs(model: gpt.GPT, tokens: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """``(B, N)``: the log-probability of each response token given everything before it."""
    _check_sequences("tokens", tokens, model.config.vocab_size, prompt_length)
    logits = model(tokens[:, :-1])  # (B, T-1, V)
    logp = F.log_softmax(logits.float(), -1).gather(-1, tokens[:, 1:, None])[..., 0]
    return logp[:, prompt_length - 1:]


@torch.no_grad()
def response_entropy(model: gpt.GPT, tokens: torch.Tensor, prompt_length: int,
                     mask: torch.Tensor) -> float:
    """The model's entropy (nats) of its next-token distribution, averaged over response tokens."""
    _check_sequences("tokens", tokens, model.config.vocab_size, prompt_length)
    check_bool_tensor("mask", mask, shape="(B, N)")
    if mask.dtype != torch.bool or mask.shape != (tokens.shape[0], tokens.shape[1] - prompt_length):
        raise ValueError(f"mask must be a bool (B, N) tensor with N = {tokens.shape[1]} - "
                         f"{prompt_length} response positions, got {mask.dtype} "
                         f"{tuple(mask.shape)}")
    logp = F.log_softmax(model(tokens[:, :-1]).float(), -1)[:, prompt_length - 1:]  # (B, N, V)
    entropy = -(logp.exp() * logp).sum(-1)
    m = mask.to(entropy.dtype)
    return float((entropy * m).sum() / m.sum().clamp(min=1))


def prompts_of(problems: Sequence[tuple[int, list[int]]], device: torch.device | str = "cpu",
               ) -> torch.Tensor:
    """``(P, L)`` the encoded prompts of problems that all have the same number of changes."""
    reasoning.check_problems(problems)
    return torch.tensor([reasoning.encode(reasoning.format_problem(s, c)) for s, c in problems],
                        device=device)


@torch.no_grad()
def rollouts(model: gpt.GPT, prompts: torch.Tensor, max_new_tokens: int,
             generator: torch.Generator, temperature: float = 1.0) -> torch.Tensor:
    """``(B, L + n)``: each prompt followed by a sampled completion, ``.``-padded after its end."""
    check_ids("prompts", prompts, model.config.vocab_size, ndim=2, shape="(B, L)")
    if prompts.shape[1] == 0:
        raise ValueError(f"prompts must hold at least one token per row, got shape "
                         f"{tuple(prompts.shape)}")
    was_training = model.training
    model.eval()
    out = sampling.sample(model.cached_step(), prompts, max_new_tokens, generator,
                          temperature=temperature, eos_id=END_ID)
    model.train(was_training)
    return out


def completions_of(tokens: torch.Tensor, prompt_length: int) -> list[str]:
    """The response texts, up to and including the first ``.``."""
    _check_sequences("tokens", tokens, len(reasoning.VOCAB), prompt_length)
    texts = []
    for row in tokens[:, prompt_length:].tolist():
        text = reasoning.decode(row)
        texts.append(text[:text.index(reasoning.END) + 1] if reasoning.END in text else text)
    return texts


@torch.no_grad()
def sample_completions(model: gpt.GPT, problems: Sequence[tuple[int, list[int]]], n: int,
                       seed: int = 0, temperature: float = 1.0, max_rows: int = 4096,
                       ) -> list[list[str]]:
    """``n`` sampled completions per problem (all problems with the same number of changes)."""
    k = reasoning.check_problems(problems)
    check_int("n", n, minimum=1)
    check_int("max_rows", max_rows, minimum=1)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    prompts = prompts_of(problems, device).repeat_interleave(n, 0)
    texts: list[str] = []
    for i in range(0, len(prompts), max_rows):
        tokens = rollouts(model, prompts[i:i + max_rows], 2 * k + 2, generator, temperature)
        texts += completions_of(tokens, prompts.shape[1])
    return [texts[p * n:(p + 1) * n] for p in range(len(problems))]


def sample_answers(model: gpt.GPT, problems: Sequence[tuple[int, list[int]]], n: int,
                   seed: int = 0, temperature: float = 1.0) -> list[list[int | None]]:
    """The :func:`course_lib.reasoning.final_answer` of :func:`sample_completions`."""
    return [[reasoning.final_answer(t) for t in row]
            for row in sample_completions(model, problems, n, seed, temperature)]


def correct_counts(answers: Sequence[Sequence[int | None]],
                   problems: Sequence[tuple[int, list[int]]]) -> list[int]:
    """How many of each problem's sampled answers are right.

    Example:
        >>> correct_counts([[8, 8, None], [1, 2, 3]], [(7, [3, -2, 1]), (0, [1])])
        [2, 1]
    """
    check_sequence("problems", problems)
    for row in check_sequence("answers", answers):
        if isinstance(row, str) or not isinstance(row, Sequence):
            raise TypeError(f"answers must hold one sequence of answers per problem, got "
                            f"{type(row).__name__} {row!r}")
    if len(answers) != len(problems):
        raise ValueError(f"answers and problems must have the same length (one row of answers "
                         f"per problem), got {len(answers)} and {len(problems)}")
    return [sum(a == reasoning.answer_of(s, c) for a in row)
            for row, (s, c) in zip(answers, problems)]


# -- training ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOConfig:
    """Section 4's training run."""

    k: int = 6  # changes per problem
    steps: int = 120  # optimiser batches of rollouts
    prompts_per_step: int = 16  # P
    group_size: int = 8  # G samples per prompt
    inner_steps: int = 2  # gradient steps on each batch of rollouts (the ratio leaves 1 after one)
    lr: float = 2e-4  # AdamW
    clip_eps: float | None = 0.2  # None: no clipping (an ablation)
    beta: float = 0.04  # weight of the k3 KL to the reference
    temperature: float = 1.0
    reward: Literal["correct", "format", "lenient"] = "correct"  # a key of REWARDS
    advantage: Literal["group", "rloo", "centred"] = "group"  # ADVANTAGES' ("centred": no std)
    level: Literal["token", "sequence"] = "token"  # grpo_loss's averaging
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("k", "steps", "prompts_per_step", "inner_steps"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("group_size", self.group_size, minimum=2)  # one sample has no group to beat
        check_positive("lr", self.lr)
        check_positive("temperature", self.temperature)
        if self.clip_eps is not None and not 0 <= check_finite("clip_eps", self.clip_eps) < 1:
            raise ValueError(f"clip_eps must lie in [0, 1) (or be None: no clipping), got "
                             f"{self.clip_eps}")
        if check_finite("beta", self.beta) < 0:
            raise ValueError(f"beta must be at least 0, got {self.beta}")
        for name, allowed in (("reward", tuple(REWARDS)),
                              ("advantage", tuple(ADVANTAGES)), ("level", ("token", "sequence"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got "
                                 f"{getattr(self, name)!r}")

    @property
    def max_new_tokens(self) -> int:
        """A chain of ``k`` digits and commas, its end, and one token to spare."""
        return 2 * self.k + 2


def train_grpo(policy: gpt.GPT, reference: gpt.GPT, config: GRPOConfig,
               progress: bool = False,
               on_step: Callable[[int, gpt.GPT], None] | None = None,
               ) -> dict[str, list[float]]:
    """Train ``policy`` in place with GRPO; ``reference`` stays frozen.

    ``on_step(step, policy)``, if given, is called after each step (``step`` from 1), for
    measurements during training (its time is not counted in ``seconds``).

    Returns, per step: ``reward`` (the mean reward trained on), ``correct`` (the share of right
    answers among the rollouts, whatever the reward), ``format``, ``kl`` (k3 per response
    token), ``length`` (response tokens), ``clipped`` (the share of tokens whose ratio was
    clipped, last inner step), ``zero_groups`` (groups with equal rewards), ``entropy`` (the
    policy's entropy per response token, in nats, before the step's update) and ``seconds``.
    """
    from tqdm import tqdm

    if not isinstance(config, GRPOConfig):
        raise TypeError(f"config must be a GRPOConfig, got {type(config).__name__}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a function of (step, policy) or None, got "
                        f"{type(on_step).__name__}")
    if reference.config.vocab_size != policy.config.vocab_size:
        raise ValueError(f"reference must share the policy's vocabulary, got "
                         f"{reference.config.vocab_size} tokens against "
                         f"{policy.config.vocab_size}")
    reward_fn = REWARDS[config.reward]
    advantage_fn = ADVANTAGES[config.advantage]
    device = next(policy.parameters()).device
    rng = random.Random(config.seed)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    history: dict[str, list[float]] = {key: [] for key in (
        "reward", "correct", "format", "kl", "length", "clipped", "zero_groups", "entropy")}
    start, outside = time.perf_counter(), 0.0
    for step in tqdm(range(config.steps), disable=not progress, desc="GRPO"):
        problems = [reasoning.make_problem(rng, config.k) for _ in range(config.prompts_per_step)]
        prompts = prompts_of(problems, device).repeat_interleave(config.group_size, 0)
        L = prompts.shape[1]
        tokens = rollouts(policy, prompts, config.max_new_tokens, generator, config.temperature)
        texts = completions_of(tokens, L)
        answers = [reasoning.answer_of(s, c) for s, c in problems
                   for _ in range(config.group_size)]
        rewards = torch.tensor([reward_fn(t, a) for t, a in zip(texts, answers)], device=device)
        grouped = rewards.view(-1, config.group_size)
        advantages = advantage_fn(grouped).flatten()
        mask = response_mask(tokens, L)
        with torch.no_grad():
            logp_old = token_logprobs(policy, tokens, L)
            logp_ref = token_logprobs(reference, tokens, L)
            history["entropy"].append(response_entropy(policy, tokens, L, mask))
        for _ in range(config.inner_steps):
            logp = token_logprobs(policy, tokens, L)
            loss = grpo_loss(logp, logp_old, logp_ref, advantages, mask, config.clip_eps,
                             config.beta, config.level)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
        with torch.no_grad():
            m = mask.float()
            ratio = (logp.detach() - logp_old).exp()
            eps = math.inf if config.clip_eps is None else config.clip_eps
            clipped = ((ratio - 1).abs() > eps).float()
            history["kl"].append(float((k3_kl(logp_old, logp_ref) * m).sum() / m.sum()))
            history["clipped"].append(float((clipped * m).sum() / m.sum()))
        history["reward"].append(float(rewards.mean()))
        history["correct"].append(sum(reasoning.correctness_reward(t, a)
                                      for t, a in zip(texts, answers)) / len(texts))
        history["format"].append(sum(map(reasoning.format_reward, texts)) / len(texts))
        history["length"].append(float(mask.sum(1).float().mean()))
        history["zero_groups"].append(float((grouped.std(1) == 0).float().mean()))
        if on_step is not None:
            paused, mode = time.perf_counter(), policy.training
            on_step(step + 1, policy)
            policy.train(mode)
            outside += time.perf_counter() - paused
    history["seconds"] = [time.perf_counter() - start - outside]
    return history


def pass_at_1_and_se(correct: Sequence[int], n: int) -> tuple[float, float]:
    """pass@1 (the mean share of right samples per problem) and its standard error over problems.

    Example:
        >>> pass_at_1_and_se([4, 0], 4)
        (0.5, 0.5)
    """
    check_int("n", n, minimum=1)
    if not check_sequence("correct", correct):
        raise ValueError("correct must hold one count per problem, got none")
    for c in correct:
        if not 0 <= check_int("correct", c) <= n:
            raise ValueError(f"correct must hold counts in [0, n] = [0, {n}], got {c}")
    return reasoning.mean_and_se([c / n for c in correct])


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Mean and standard error across seeds, with the values.

    Example:
        >>> summary([0.5, 0.7])["mean"]
        0.6
    """
    mean, se = reasoning.mean_and_se(values)
    return {"mean": round(mean, 12), "se": se, "values": list(values),
            "sd": se * math.sqrt(len(values))}


def load_runs(part: Literal["hacking", "curves"]) -> dict[str, Any]:
    """The shipped results of ``scripts/train_reasoning.py --part hacking|curves``
    (``course_lib/data/reasoning_<part>.json.xz``)."""
    from course_lib import finetune

    if part not in ("hacking", "curves"):
        raise ValueError(f"part must be 'hacking' or 'curves', got {part!r}")
    results: dict[str, Any] = finetune.load_json_xz(
        reasoning.DATA_DIR / f"reasoning_{part}.json.xz",
        f"scripts/train_reasoning.py --part {part}")
    return results
