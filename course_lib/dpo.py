r"""Direct preference optimisation (Rafailov et al., 2023) from scratch, on a checkable preference.

Taught in chapter 8 (from a base model to an assistant), section 4. Given a prompt :math:`x` and
two completions, the preferred :math:`y_w` and the other :math:`y_l`, DPO raises the policy's
log-probability of :math:`y_w` relative to a frozen reference model and lowers that of
:math:`y_l`:

.. math:: \mathcal L_{DPO} = -\,\mathbb E \log \sigma\!\Big(\beta \big[
          (\log \pi_\theta(y_w|x) - \log \pi_{ref}(y_w|x))
          - (\log \pi_\theta(y_l|x) - \log \pi_{ref}(y_l|x)) \big]\Big).

It is the loss of RLHF's KL-regularised reward maximisation with the reward written in terms
of the policy itself (chapter 8's exercises 7 and 9 derive it): no reward model, no sampling
during training, no PPO.

The toy preference (:func:`has_property`): a completion is preferred when it contains no letter
``e``, a property any string can be checked for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib import gpt, sampling
from course_lib.checks import (
    check_finite_tensor,
    check_float_tensor,
    check_ids,
    check_positive,
    check_same_dtype,
)


def _vocab_size(model: object) -> int | None:
    """The vocabulary of a course GPT (None for another language model: its own checks apply)."""
    return model.config.vocab_size if isinstance(model, gpt.GPT) else None


def _check_sequences(name: str, tokens: torch.Tensor, model: object) -> None:
    check_ids(name, tokens, _vocab_size(model), ndim=2, shape="(B, T)")
    if tokens.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one token per row, got shape "
                         f"{tuple(tokens.shape)}")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
             beta: float) -> torch.Tensor:
    r"""The mean DPO loss of a batch of pairs from sequence log-probabilities.

    Args:
        policy_chosen, policy_rejected: ``(B,)``, :math:`\log \pi_\theta(y|x)` of the preferred
            and of the other completion (sums over the completion's tokens).
        reference_chosen, reference_rejected: ``(B,)``, the same under the frozen reference.
        beta: :math:`\beta > 0`, the strength of the pull towards the reference.

    Returns:
        A 0-d tensor, :math:`-\frac1B \sum_b \log\sigma(\beta\,(\Delta_w - \Delta_l))` with
        :math:`\Delta = \log\pi_\theta - \log\pi_{ref}`; :math:`\log 2` when policy = reference.

    Example:
        >>> z = torch.tensor([-3.0, -5.0])
        >>> round(dpo_loss(z, z, z, z, beta=0.1).item(), 4)  # log 2
        0.6931
    """
    named = {"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
             "reference_chosen": reference_chosen, "reference_rejected": reference_rejected}
    for name, t in named.items():
        check_float_tensor(name, t)
    check_same_dtype(**named)
    shapes = {tuple(t.shape) for t in (policy_chosen, policy_rejected, reference_chosen,
                                       reference_rejected)}
    if len(shapes) != 1 or policy_chosen.dim() != 1:
        got = [tuple(t.shape) for t in (policy_chosen, policy_rejected, reference_chosen,
                                        reference_rejected)]
        raise ValueError(f"the four log-probabilities (policy_chosen, policy_rejected, "
                         f"reference_chosen, reference_rejected) must be (B,) tensors of one "
                         f"shape, got {got}")
    if policy_chosen.shape[0] == 0:
        raise ValueError("policy_chosen and the other log-probabilities hold an empty batch: the "
                         "mean loss over no pairs is NaN")
    for name, t in named.items():
        if bool(torch.isnan(t).any()):
            raise ValueError(f"{name} holds NaN")
    check_positive("beta", beta)
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(beta * margin).mean()


def completion_logprobs(model: gpt.GPT, tokens: torch.Tensor, prompt_length: int) -> torch.Tensor:
    r""":math:`\log p(y|x)` per row: the summed log-probabilities of the tokens after the prompt.

    Args:
        model: any ``(B, T) -> (B, T, V)`` language model.
        tokens: ``(B, T)`` prompt followed by the completion, every row the same lengths.
        prompt_length: the prompt's length; the completion is ``tokens[:, prompt_length:]``.

    Returns:
        ``(B,)`` in the logits' dtype, with gradients if the model has them.
    """
    _check_sequences("tokens", tokens, model)
    if not 1 <= prompt_length < tokens.shape[1]:
        raise ValueError(f"prompt_length must lie in [1, {tokens.shape[1]}), got {prompt_length}")
    log_probs = F.log_softmax(model(tokens[:, :-1]), dim=-1)  # (B, T-1, V)
    picked = log_probs.gather(-1, tokens[:, 1:, None])[..., 0]  # (B, T-1)
    return picked[:, prompt_length - 1:].sum(-1)


def has_property(text: str) -> bool:
    """The toy preference: True when ``text`` contains no letter e (either case).

    Example:
        >>> has_property("a good day"), has_property("the end")
        (True, False)
    """
    return "e" not in text.lower()


@torch.no_grad()
def sample_completions(model: gpt.GPT, prompts: torch.Tensor, length: int, seed: int,
                       temperature: float = 1.0) -> torch.Tensor:
    """``(B, P + length)``: each prompt row followed by a sampled completion of ``length``."""
    _check_sequences("prompts", prompts, model)
    g = torch.Generator(device=prompts.device).manual_seed(seed)
    return sampling.sample(model.cached_step(), prompts, length, g, temperature=temperature)


def preference_pairs(tokens: torch.Tensor, prompt_length: int, vocabulary: list[str],
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair samples with the property with samples without it, prompt by prompt.

    ``tokens`` holds ``(n_prompts, k, T)`` samples (``k`` per prompt). For each prompt, each
    sample with the property is paired with one without it, as long as both kinds remain.

    Returns:
        ``chosen, rejected``, both ``(n_pairs, T)``.
    """
    check_ids("tokens", tokens, len(vocabulary), ndim=3, shape="(n_prompts, k, T)")
    chosen, rejected = [], []
    for group in tokens:
        texts = ["".join(vocabulary[i] for i in row[prompt_length:].tolist()) for row in group]
        good = [row for row, text in zip(group, texts) if has_property(text)]
        bad = [row for row, text in zip(group, texts) if not has_property(text)]
        for w, lose in zip(good, bad):
            chosen.append(w)
            rejected.append(lose)
    if not chosen:
        raise ValueError("no prompt had samples both with and without the property")
    return torch.stack(chosen), torch.stack(rejected)


@torch.no_grad()
def property_rate_and_kl(policy: gpt.GPT, reference: gpt.GPT, prompts: torch.Tensor,
                         length: int, vocabulary: list[str], seed: int,
                         ) -> tuple[float, float]:
    r"""Sample from ``policy``; return the fraction with the property and the KL to the reference.

    The KL is the Monte-Carlo estimate :math:`\mathbb E_{y \sim \pi}[\log \pi(y|x) -
    \log \pi_{ref}(y|x)]` over the samples, in nats per completion (0 for the reference itself).
    """
    policy.eval()
    tokens = sample_completions(policy, prompts, length, seed)
    p = prompts.shape[1]
    texts = ["".join(vocabulary[i] for i in row[p:].tolist()) for row in tokens]
    rate = sum(has_property(t) for t in texts) / len(texts)
    kl = (completion_logprobs(policy, tokens, p) - completion_logprobs(reference, tokens, p))
    return rate, float(kl.mean())


def train_dpo(policy: gpt.GPT, reference: gpt.GPT, chosen: torch.Tensor, rejected: torch.Tensor,
              prompt_length: int, beta: float, steps: int, lr: float, batch_size: int,
              seed: int = 0) -> list[float]:
    """Train ``policy`` with :func:`dpo_loss` on the pairs, ``reference`` frozen; return the losses.

    The reference's log-probabilities are computed once: it never changes.
    """
    _check_sequences("chosen", chosen, policy)
    _check_sequences("rejected", rejected, policy)
    if chosen.shape != rejected.shape or chosen.shape[0] == 0:
        raise ValueError(f"chosen and rejected must hold the same number (>= 1) of pairs of one "
                         f"length, got {tuple(chosen.shape)} and {tuple(rejected.shape)}")
    check_positive("beta", beta)
    reference.eval()
    with torch.no_grad():
        ref_w = completion_logprobs(reference, chosen, prompt_length)
        ref_l = completion_logprobs(reference, rejected, prompt_length)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    policy.train()
    losses = []
    for _ in range(steps):
        rows = torch.randperm(len(chosen), generator=g, device=g.device)[:batch_size]
        rows = rows.to(chosen.device)
        loss = dpo_loss(completion_logprobs(policy, chosen[rows], prompt_length),
                        completion_logprobs(policy, rejected[rows], prompt_length),
                        ref_w[rows], ref_l[rows], beta)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    policy.eval()
    return losses


def implicit_rewards(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                     reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                     beta: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    r"""DPO's implicit rewards of both completions of each pair, and the pairs' accuracy.

    The reward that the policy is the optimum of (:func:`kl_regularised_optimum`, inverted),
    without its term of :math:`x` alone, which is the same for both completions of a pair
    (chapter 8's exercise 9 derives it). The accuracy is the share of pairs whose chosen
    completion gets the strictly larger reward (a tie, such as the reference itself gives,
    counts as wrong).

    Args: as :func:`dpo_loss`.

    Returns:
        ``(chosen_rewards, rejected_rewards, accuracy)``: two ``(B,)`` tensors in the inputs'
        dtype and a Python float in ``[0, 1]``.

    Example:
        >>> z = torch.tensor([-3.0, -5.0])
        >>> implicit_rewards(z, z, z, z, beta=0.1)[2]  # the reference itself: every pair a tie
        0.0
    """
    named = {"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
             "reference_chosen": reference_chosen, "reference_rejected": reference_rejected}
    for name, t in named.items():
        check_float_tensor(name, t, ndim=1, shape="(B,)")
    check_same_dtype(**named)
    if len({tuple(t.shape) for t in named.values()}) != 1 or policy_chosen.shape[0] == 0:
        raise ValueError(f"the four log-probabilities ({', '.join(named)}) must be (B,) tensors "
                         f"of one shape, B >= 1; got {[tuple(t.shape) for t in named.values()]}")
    check_positive("beta", beta)
    chosen = beta * (policy_chosen - reference_chosen)
    rejected = beta * (policy_rejected - reference_rejected)
    return chosen, rejected, float((chosen > rejected).double().mean())


def dpo_pair_weights(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                     reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                     beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The implicit rewards of each pair (as :func:`implicit_rewards`) and the log of how much
    DPO's gradient weighs the pair.

    The weight of pair :math:`i` is minus the derivative of its term of the DPO loss (before the
    mean) with respect to ``policy_chosen[i]``, divided by beta; the derivative with respect to
    ``policy_rejected[i]`` is the same with the sign flipped (chapter 8's exercise 9 derives it).
    It lies in :math:`(0, 1)`, is 1/2 where the policy is the reference, and is small for a pair
    the implicit rewards already rank right by a wide margin: so small, when the rewards are a
    thousand apart, that it underflows, while its log, returned here, stays exact.

    Args: as :func:`dpo_loss`.

    Returns:
        ``(chosen_rewards, rejected_rewards, log_weights)``: three ``(B,)`` tensors in the
        inputs' dtype.

    Example:
        >>> z = torch.tensor([-3.0, -5.0])
        >>> dpo_pair_weights(z, z, z, z, beta=0.1)[2].exp()  # the reference itself
        tensor([0.5000, 0.5000])
    """
    chosen, rejected, _ = implicit_rewards(policy_chosen, policy_rejected, reference_chosen,
                                           reference_rejected, beta)
    return chosen, rejected, F.logsigmoid(rejected - chosen)


def kl_regularised_optimum(reference_probs: torch.Tensor, rewards: torch.Tensor,
                           betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The reward and the KL of the policy that maximises RLHF's objective, for each beta.

    Over a finite set of completions of one prompt, the policy that maximises
    :math:`\mathbb E_{y\sim\pi}[r(y)] - \beta\,\mathrm{KL}(\pi \Vert \pi_{ref})` has a closed
    form (a Lagrange multiplier for :math:`\sum_y \pi(y) = 1`; Peters and Schaal 2007, Peng et al.
    2019, Korbak et al. 2022, and Rafailov et al. 2023's eq. 4; chapter 8's exercise 7 derives
    it). Computed in log space, so a small beta does not overflow. Sweeping beta traces the best
    reward reachable at each KL: the reward-against-KL frontier.

    Args:
        reference_probs: ``(K,)``, positive, summing to one.
        rewards: ``(K,)``, the same dtype.
        betas: ``(N,)``, positive, the same dtype.

    Returns:
        ``(expected_reward, kl)``, each ``(N,)``: :math:`\mathbb E_{\pi^*}[r]` and
        :math:`\mathrm{KL}(\pi^* \Vert \pi_{ref})` in nats.

    Example:
        >>> p, r = torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])
        >>> reward, kl = kl_regularised_optimum(p, r, torch.tensor([1e6, 1e-3]))
        >>> [round(v, 3) for v in reward.tolist()], round(kl[1].item(), 3)  # KL: log 2 at beta -> 0
        ([0.5, 1.0], 0.693)
    """
    for name, t in (("reference_probs", reference_probs), ("rewards", rewards),
                    ("betas", betas)):
        check_float_tensor(name, t, ndim=1, shape="(K,)" if name != "betas" else "(N,)")
    check_same_dtype(reference_probs=reference_probs, rewards=rewards, betas=betas)
    if reference_probs.shape != rewards.shape:
        raise ValueError(f"reference_probs {tuple(reference_probs.shape)} and rewards "
                         f"{tuple(rewards.shape)} must have the same shape (K,)")
    if not bool((reference_probs > 0).all()) or not bool((betas > 0).all()):
        raise ValueError("reference_probs and betas must be positive")
    check_finite_tensor("rewards", rewards)  # a NaN reward would make every optimum NaN
    log_ref = reference_probs.log()
    log_opt = torch.log_softmax(log_ref[None, :] + rewards[None, :] / betas[:, None], dim=-1)
    opt = log_opt.exp()  # (N, K)
    return (opt * rewards).sum(-1), (opt * (log_opt - log_ref)).sum(-1)
