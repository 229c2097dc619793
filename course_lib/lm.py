"""Encoder-only (BERT) and decoder-only (GPT) language modelling: their masks and their losses.

Taught in chapter 3, section 5: the same layers trained two ways. BERT (Devlin et al., 2019) sees
every real token (:func:`bert_attention_mask`), corrupts its input (:func:`mask_tokens`) and is
scored on the corrupted positions only (:func:`masked_lm_loss`); GPT (Radford et al., 2018, 2019)
sees the past only (:func:`gpt_attention_mask`) and predicts the next token everywhere
(:func:`next_token_loss`, which chapter 4 trains its GPT with).

Masks follow course_lib's convention: boolean, ``True`` = "may attend"; padding masks ``(B, T)``
are ``True`` at real tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.attention import causal_mask
from course_lib.checks import check_bool_tensor, check_float_tensor, check_ids, check_token_id
from course_lib.transformer import key_padding_mask

IGNORE_INDEX = -100  # targets with this value do not count in a loss (F.cross_entropy's default)
TARGET_DTYPES = (torch.long, torch.uint8)  # the class targets F.cross_entropy takes


def _check_logits_and_targets(logits: torch.Tensor, targets: torch.Tensor, name: str) -> None:
    check_float_tensor("logits", logits, ndim=3, shape="(B, T, V)")
    check_ids(name, targets, logits.shape[-1], ignore_index=IGNORE_INDEX, dtypes=TARGET_DTYPES)


def bert_attention_mask(padding: torch.Tensor) -> torch.Tensor:
    """Encoder-only (BERT) mask: every real token sees every real token, ``(B, 1, T, T)``.

    Bidirectional: position ``t`` may attend to positions after it.

    Example:
        >>> bert_attention_mask(torch.tensor([[True, True, False]]))[0, 0].int()
        tensor([[1, 1, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    check_bool_tensor("padding", padding, ndim=2, shape="(batch, length)")
    T = padding.shape[-1]
    return key_padding_mask(padding).expand(-1, -1, T, -1)  # (B, 1, T, T)


def gpt_attention_mask(padding: torch.Tensor) -> torch.Tensor:
    """Decoder-only (GPT) mask: causal and padding, ``(B, 1, T, T)``.

    Position ``t`` may attend to real positions ``<= t`` only.

    Example:
        >>> gpt_attention_mask(torch.tensor([[True, True, False]]))[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    check_bool_tensor("padding", padding, ndim=2, shape="(batch, length)")
    T = padding.shape[-1]
    return bert_attention_mask(padding) & causal_mask(T, padding.device)  # (B, 1, T, T)


def mask_tokens(tokens: torch.Tensor, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None, p: float = 0.15,
                special: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption (Devlin et al., 2019, section 3.1).

    Each position not marked ``special`` is selected with probability ``p``; a selected position
    becomes ``mask_id`` with probability 0.8, a uniformly random id in ``[0, vocab_size)`` with
    probability 0.1, and stays as it is with probability 0.1. Only selected positions are
    predicted: the other targets are ``-100`` (ignored by :func:`masked_lm_loss`). Every draw
    comes from ``generator``, so one seed gives one corruption.

    Args:
        tokens: ``(B, T)`` integer ids.
        mask_id: the id of the ``[MASK]`` token.
        vocab_size: ids for the random replacement are drawn from ``[0, vocab_size)``.
        generator: a ``torch.Generator`` on the device of ``tokens``.
        p: selection probability.
        special: optional ``(B, T)`` boolean, ``True`` at positions never selected (padding,
            ``[CLS]``, ``[SEP]``).

    Returns:
        ``(inputs, targets)``, both ``(B, T)`` of the dtype of ``tokens``.

    Example:
        >>> x, y = mask_tokens(torch.tensor([[5, 6, 7]]), mask_id=1, vocab_size=8, p=1.0,
        ...                    generator=torch.Generator().manual_seed(0),
        ...                    special=torch.tensor([[True, False, False]]))
        >>> y.tolist()
        [[-100, 6, 7]]
        >>> x[0, 0].item()
        5
    """
    check_ids("tokens", tokens, vocab_size)
    check_token_id("mask_id", mask_id, vocab_size)
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
    if special is not None and (special.shape != tokens.shape or special.dtype != torch.bool):
        raise ValueError(f"special must be boolean with the shape of tokens {tuple(tokens.shape)},"
                         f" got {special.dtype} {tuple(special.shape)}")
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    r = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    rand_ids = torch.randint(vocab_size, tokens.shape, generator=generator,
                             device=tokens.device, dtype=tokens.dtype)
    selected = u < p
    if special is not None:
        selected = selected & ~special
    inputs = torch.where(selected & (r < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(selected & (r >= 0.8) & (r < 0.9), rand_ids, inputs)
    targets = torch.where(selected, tokens, torch.full_like(tokens, IGNORE_INDEX))
    return inputs, targets


def masked_lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""BERT's objective: mean cross-entropy over the selected (masked) positions only.

    .. math:: \mathcal L = -\frac{1}{|M|} \sum_{(b, t) \in M} \log p_\theta(x_{b,t} \mid \tilde x_b)

    Args:
        logits: ``(B, T, V)`` from a bidirectional model on the corrupted inputs.
        targets: ``(B, T)`` from :func:`mask_tokens` (``-100`` = not predicted).

    Example:
        >>> loss = masked_lm_loss(torch.zeros(1, 2, 4), torch.tensor([[2, -100]]))
        >>> round(loss.item(), 4)  # uniform over 4 tokens: log 4
        1.3863
    """
    _check_logits_and_targets(logits, targets, "targets")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)} do not match targets (B, T) "
                         f"= {tuple(targets.shape)}")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor,
                    padding: torch.Tensor | None = None) -> torch.Tensor:
    r"""GPT's objective: predict token ``t+1`` from positions ``<= t``, mean over real targets.

    .. math:: \mathcal L = -\frac{1}{N} \sum_{b} \sum_{t=1}^{T-1}
              \log p_\theta(x_{b,t+1} \mid x_{b,\le t})

    Args:
        logits: ``(B, T, V)`` from a causal model on ``tokens``.
        tokens: ``(B, T)`` the same sequence (the targets are the tokens shifted by one).
        padding: optional ``(B, T)``, ``True`` = real token; padded targets do not count.

    Example:
        >>> round(next_token_loss(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 2]])).item(), 4)
        1.3863
    """
    _check_logits_and_targets(logits, tokens, "tokens")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)} do not match tokens (B, T) "
                         f"= {tuple(tokens.shape)}")
    if padding is not None:
        check_bool_tensor("padding", padding, shape="(B, T)")
        if padding.shape != tokens.shape:
            raise ValueError(f"padding must have the shape of tokens {tuple(tokens.shape)}, got "
                             f"{tuple(padding.shape)}")
    targets = tokens[:, 1:]  # (B, T-1): the token after each position
    if padding is not None:
        targets = targets.masked_fill(~padding[:, 1:], IGNORE_INDEX)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(),
                           ignore_index=IGNORE_INDEX)
