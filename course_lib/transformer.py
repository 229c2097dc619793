"""The Transformer (Vaswani et al., 2017): feed-forward layers, encoder and decoder stacks, the
encoder-decoder model, and the encoder-only (BERT) / decoder-only (GPT) masks and losses.

Taught in chapter 3 ("The Transformer"): section 1 (the feed-forward network as a key-value
memory), section 2 (residuals, LayerNorm, post-norm vs pre-norm), section 3 (encoder and decoder
layers, cross-attention), section 4 (the full model trained on the date task), section 5 (BERT vs
GPT) and section 6 (parameter counts). Tested against ``torch.nn.TransformerEncoderLayer``,
``torch.nn.TransformerDecoderLayer`` and ``torch.nn.Transformer`` with copied weights
(``tests/test_transformer.py``).

Conventions (as everywhere in course_lib): boolean masks, ``True`` = "may attend"; padding masks
``(B, T)`` are ``True`` at real tokens. ``torch.nn``'s boolean masks mean the opposite; convert
at the boundary with ``~mask``.

Layer names follow ``torch.nn.Transformer*Layer`` (``self_attn``, ``norm1``, ``dropout1``, ...),
except that the feed-forward weights live in ``ff.linear1`` / ``ff.linear2`` and the decoder's
cross-attention is ``cross_attn`` (torch: ``multihead_attn``); :func:`copy_from_torch_encoder_layer`
and :func:`copy_from_torch_decoder_layer` spell out the mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import Impl, causal_mask
from course_lib.multihead import MultiHeadAttention
from course_lib.positional import sinusoidal_encoding

IGNORE_INDEX = -100  # targets with this value do not count in a loss (F.cross_entropy's default)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder Transformer (defaults: a small model for a CPU).

    The base model of Vaswani et al. (2017) is ``d_model=512, n_heads=8, d_ff=2048,
    n_encoder_layers=n_decoder_layers=6, dropout=0.1, tie_embeddings=True`` with a shared
    37k-token vocabulary.
    """

    src_vocab_size: int  # number of source token ids
    tgt_vocab_size: int  # number of target token ids (the output layer's width)
    d_model: int = 64  # model width d: every residual stream vector has d features
    n_heads: int = 4  # attention heads per attention block; must divide d_model
    n_encoder_layers: int = 2  # N in the paper, encoder side
    n_decoder_layers: int = 2  # N in the paper, decoder side
    d_ff: int = 256  # hidden width of the position-wise feed-forward network (paper: 4 d)
    dropout: float = 0.1  # on embeddings, sublayer outputs, attention weights and FFN hidden
    max_len: int = 128  # longest sequence the sinusoidal position table covers
    norm_first: bool = False  # False: post-norm (Vaswani et al.); True: pre-norm (GPT-2)
    layer_norm_eps: float = 1e-5  # LayerNorm's epsilon (torch's default)
    tie_embeddings: bool = False  # share source/target embeddings and output weights (paper)
    attn_impl: Impl = "fast"  # "fast" (fused SDPA) or "reference" (step by step)


# --------------------------------------------------------------------------------------------
# Feed-forward network: a key-value memory
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network (Vaswani et al., 2017, eq. 2).

    .. math:: \mathrm{FFN}(x) = \max(0,\, x W_1 + b_1)\, W_2 + b_2

    Read as a key-value memory (Geva et al., 2021): row ``i`` of ``linear1.weight`` is a key
    :math:`k_i`, column ``i`` of ``linear2.weight`` a value :math:`v_i`, and
    :math:`\mathrm{FFN}(x) = \sum_i \mathrm{relu}(x \cdot k_i + b_{1,i})\, v_i + b_2`: the
    "memory coefficients" ``relu(x k_i + b_i)`` (:meth:`memory_coefficients`) say how much each
    of the ``d_ff`` memories is read.

    Args:
        d_model: input and output width ``d``.
        d_ff: hidden width (number of memories).
        dropout: dropout on the hidden activations during training.

    Shapes: ``(..., d) -> (..., d)``.

    Example:
        >>> ff = FeedForward(4, 8)
        >>> ff(torch.randn(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)  # rows of .weight: the keys
        self.linear2 = nn.Linear(d_ff, d_model)  # columns of .weight: the values
        self.dropout = nn.Dropout(dropout)

    def memory_coefficients(self, x: torch.Tensor) -> torch.Tensor:
        """``relu(x W_1 + b_1)``: how strongly each memory fires, ``(..., d) -> (..., d_ff)``."""
        return F.relu(self.linear1(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.memory_coefficients(x)))

    @property
    def keys(self) -> torch.Tensor:
        """``(d_ff, d)``: row ``i`` is the key of memory ``i``."""
        return self.linear1.weight

    @property
    def values(self) -> torch.Tensor:
        """``(d_ff, d)``: row ``i`` is the value written by memory ``i`` (a column of ``W_2``)."""
        return self.linear2.weight.t()


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def _check_stream(x: torch.Tensor, d_model: int, name: str) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape (batch, length, d_model={d_model}), "
                         f"got {tuple(x.shape)}")


def _check_attn_mask(mask: torch.Tensor | None, batch: int, n_heads: int, t_q: int, t_k: int,
                     name: str) -> None:
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got {mask.dtype}")
    target = (batch, n_heads, t_q, t_k)
    try:
        shape = torch.broadcast_shapes(mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target):
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to "
                         f"(batch, heads, queries, keys) = {target}")


def _check_padding(padding: torch.Tensor | None, tokens: torch.Tensor, name: str) -> None:
    if padding is None:
        return
    if padding.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = real token), got {padding.dtype}")
    if padding.shape != tokens.shape:
        raise ValueError(f"{name} must have the shape of the tokens {tuple(tokens.shape)}, "
                         f"got {tuple(padding.shape)}")


def _check_tokens(tokens: torch.Tensor, vocab_size: int, max_len: int, name: str) -> None:
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(tokens.shape)}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids, got {tokens.dtype}")
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name} has length {tokens.shape[1]} but the position table covers "
                         f"max_len={max_len}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} holds ids outside [0, {vocab_size}): "
                         f"min {int(tokens.min())}, max {int(tokens.max())}")


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class EncoderLayer(nn.Module):
    r"""One encoder layer: self-attention and a feed-forward network, each in a residual block.

    Post-norm (Vaswani et al., 2017), ``norm_first=False``:

    .. math:: x \leftarrow \mathrm{LN}(x + \mathrm{Drop}(\mathrm{SelfAttn}(x))), \quad
              x \leftarrow \mathrm{LN}(x + \mathrm{Drop}(\mathrm{FFN}(x)))

    Pre-norm (GPT-2; Xiong et al., 2020), ``norm_first=True``:

    .. math:: x \leftarrow x + \mathrm{Drop}(\mathrm{SelfAttn}(\mathrm{LN}(x))), \quad
              x \leftarrow x + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}(x)))

    Equals ``torch.nn.TransformerEncoderLayer(batch_first=True, activation="relu")`` with the
    same weights (see :func:`copy_from_torch_encoder_layer`).

    Args:
        d_model, n_heads, d_ff, dropout, norm_first, layer_norm_eps: see :class:`TransformerConfig`.

    Shapes:
        ``x`` ``(B, T, d)``; ``mask`` boolean broadcastable to ``(B, h, T, T)``, ``True`` = may
        attend (e.g. :func:`key_padding_mask` of the padding). Returns ``(B, T, d)`` and, with
        ``need_weights``, the attention weights ``(B, h, T, T)``.

    Example:
        >>> layer = EncoderLayer(8, 2, 16)
        >>> y, w = layer(torch.randn(1, 3, 8), need_weights=True)
        >>> y.shape, w.shape
        (torch.Size([1, 3, 8]), torch.Size([1, 2, 3, 3]))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, layer_norm_eps: float = 1e-5,
                 attn_impl: Impl = "fast") -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, impl=attn_impl)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool,
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, weights = self.self_attn(x, x, x, mask=mask, need_weights=need_weights)
        return self.dropout1(out), weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        _check_stream(x, self.d_model, "encoder layer input x")
        _check_attn_mask(mask, x.shape[0], self.self_attn.n_heads, x.shape[1], x.shape[1],
                         "encoder self-attention mask")
        if self.norm_first:
            out, weights = self._sa_block(self.norm1(x), mask, need_weights)
            x = x + out
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            out, weights = self._sa_block(x, mask, need_weights)
            x = self.norm1(x + out)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, weights


class DecoderLayer(nn.Module):
    r"""One decoder layer: masked self-attention, cross-attention to the encoder, feed-forward.

    Post-norm (``norm_first=False``), with :math:`m` the encoder output ("memory"):

    .. math:: y \leftarrow \mathrm{LN}(y + \mathrm{SelfAttn}(y)), \;
              y \leftarrow \mathrm{LN}(y + \mathrm{Attn}(Q{=}y, K{=}V{=}m)), \;
              y \leftarrow \mathrm{LN}(y + \mathrm{FFN}(y))

    and pre-norm normalises each sublayer's input instead. Equals
    ``torch.nn.TransformerDecoderLayer(batch_first=True, activation="relu")`` with the same
    weights (see :func:`copy_from_torch_decoder_layer`).

    Shapes:
        ``y`` ``(B, T, d)``, ``memory`` ``(B, S, d)``; ``self_mask`` broadcastable to
        ``(B, h, T, T)`` (usually :func:`~course_lib.attention.causal_mask`), ``memory_mask`` to
        ``(B, h, T, S)`` (usually :func:`key_padding_mask` of the source). Returns ``(B, T, d)``
        and, with ``need_weights``, ``(self_weights (B, h, T, T), cross_weights (B, h, T, S))``.

    Example:
        >>> layer = DecoderLayer(8, 2, 16)
        >>> y, (ws, wc) = layer(torch.randn(1, 3, 8), torch.randn(1, 5, 8), need_weights=True)
        >>> y.shape, ws.shape, wc.shape
        (torch.Size([1, 3, 8]), torch.Size([1, 2, 3, 3]), torch.Size([1, 2, 3, 5]))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, layer_norm_eps: float = 1e-5,
                 attn_impl: Impl = "fast") -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, impl=attn_impl)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, impl=attn_impl)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, y: torch.Tensor, memory: torch.Tensor,
                self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                need_weights: bool = False,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor | None, torch.Tensor | None]]:
        _check_stream(y, self.d_model, "decoder layer input y")
        _check_stream(memory, self.d_model, "decoder layer memory")
        if memory.shape[0] != y.shape[0]:
            raise ValueError(f"memory batch {memory.shape[0]} differs from the decoder input "
                             f"batch {y.shape[0]} (memory {tuple(memory.shape)}, "
                             f"y {tuple(y.shape)})")
        B, T, S, h = y.shape[0], y.shape[1], memory.shape[1], self.self_attn.n_heads
        _check_attn_mask(self_mask, B, h, T, T, "decoder self-attention mask")
        _check_attn_mask(memory_mask, B, h, T, S, "decoder cross-attention (memory) mask")

        def self_block(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            out, w = self.self_attn(z, z, z, mask=self_mask, need_weights=need_weights)
            return self.dropout1(out), w

        def cross_block(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            out, w = self.cross_attn(z, memory, memory, mask=memory_mask,
                                     need_weights=need_weights)
            return self.dropout2(out), w

        if self.norm_first:
            out, w_self = self_block(self.norm1(y))
            y = y + out
            out, w_cross = cross_block(self.norm2(y))
            y = y + out
            y = y + self.dropout3(self.ff(self.norm3(y)))
        else:
            out, w_self = self_block(y)
            y = self.norm1(y + out)
            out, w_cross = cross_block(y)
            y = self.norm2(y + out)
            y = self.norm3(y + self.dropout3(self.ff(y)))
        return y, (w_self, w_cross)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` s, with a final LayerNorm when ``norm_first``.

    Pre-norm layers leave the residual stream un-normalised, so the stack ends with a LayerNorm
    (as ``torch.nn.Transformer`` and GPT-2 do); post-norm layers already end with one.

    Shapes: ``x`` ``(B, S, d)``, ``mask`` broadcastable to ``(B, h, S, S)``. Returns
    ``(B, S, d)`` and a list with each layer's weights ``(B, h, S, S)`` (``None`` entries
    unless ``need_weights``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first,
                         c.layer_norm_eps, c.attn_impl) for _ in range(c.n_encoder_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return x, weights


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer` s, with a final LayerNorm when ``norm_first``.

    Shapes: ``y`` ``(B, T, d)``, ``memory`` ``(B, S, d)``. Returns ``(B, T, d)`` and a list with
    each layer's ``(self_weights, cross_weights)``.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.layers = nn.ModuleList(
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first,
                         c.layer_norm_eps, c.attn_impl) for _ in range(c.n_decoder_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None

    def forward(self, y: torch.Tensor, memory: torch.Tensor,
                self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                need_weights: bool = False,
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor | None, torch.Tensor | None]]]:
        weights = []
        for layer in self.layers:
            y, w = layer(y, memory, self_mask, memory_mask, need_weights=need_weights)
            weights.append(w)
        if self.norm is not None:
            y = self.norm(y)
        return y, weights


# --------------------------------------------------------------------------------------------
# Embeddings and positions
# --------------------------------------------------------------------------------------------


class Embedding(nn.Module):
    r"""Token embedding scaled by :math:`\sqrt{d}` plus sinusoidal positions, then dropout.

    .. math:: x_t = \sqrt{d}\; E[w_t] + PE_t

    Embeddings start at :math:`\mathcal N(0, 1/d)` so that the scaled embedding and the position
    code have comparable size. The position table is a buffer (moves with ``.to``, never
    trained). ``positions=False`` leaves positions out (the model is then permutation-equivariant).

    Shapes: ``(B, T)`` integer ids -> ``(B, T, d)``.
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float = 0.0,
                 positions: bool = True) -> None:
        super().__init__()
        self.d_model = d_model
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.positions = positions
        self.tok = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tok.weight, std=d_model ** -0.5)
        # The sinusoidal table of chapter 2 (Vaswani et al., 2017, section 3.5), ``(max_len, d)``.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _check_tokens(tokens, self.vocab_size, self.max_len, "tokens")
        x = self.tok(tokens) * math.sqrt(self.d_model)  # (B, T, d)
        if self.positions:
            x = x + self.pe[: tokens.shape[1]].to(x.dtype)
        return self.dropout(x)


# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


def key_padding_mask(padding: torch.Tensor) -> torch.Tensor:
    """``(B, T_k)`` padding (``True`` = real token) -> ``(B, 1, 1, T_k)`` attention mask.

    Broadcasts over heads and queries: no query may attend to a padded key.

    Example:
        >>> key_padding_mask(torch.tensor([[True, False]])).shape
        torch.Size([1, 1, 1, 2])
    """
    if padding.dim() != 2 or padding.dtype != torch.bool:
        raise ValueError(f"padding must be a boolean (batch, length) tensor, got "
                         f"{padding.dtype} of shape {tuple(padding.shape)}")
    return padding[:, None, None, :]


def bert_attention_mask(padding: torch.Tensor) -> torch.Tensor:
    """Encoder-only (BERT) mask: every real token sees every real token, ``(B, 1, T, T)``.

    Bidirectional: position ``t`` may attend to positions after it.

    Example:
        >>> bert_attention_mask(torch.tensor([[True, True, False]]))[0, 0].int()
        tensor([[1, 1, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
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
    T = padding.shape[-1]
    return bert_attention_mask(padding) & causal_mask(T, padding.device)  # (B, 1, T, T)


# --------------------------------------------------------------------------------------------
# Losses: masked LM (BERT) and next token (GPT)
# --------------------------------------------------------------------------------------------


def mask_tokens(tokens: torch.Tensor, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None, p: float = 0.15,
                special: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption (Devlin et al., 2019, section 3.1).

    Each position not marked ``special`` is selected with probability ``p``; a selected position
    becomes ``mask_id`` with probability 0.8, a uniformly random id in ``[0, vocab_size)`` with
    probability 0.1, and stays as it is with probability 0.1. Only selected positions are
    predicted: the other targets are ``-100`` (ignored by :func:`masked_lm_loss`).

    The random draws, in this order, all of shape ``tokens.shape`` and from ``generator``:
    ``u = torch.rand`` (selection: ``u < p``), ``r = torch.rand`` (``r < 0.8`` mask,
    ``0.8 <= r < 0.9`` random), ``rand_ids = torch.randint(vocab_size)``.

    Args:
        tokens: ``(B, T)`` integer ids.
        mask_id: the id of the ``[MASK]`` token.
        vocab_size: ids for the random replacement are drawn from ``[0, vocab_size)``.
        generator: a ``torch.Generator`` on the device of ``tokens`` (for reproducibility).
        p: selection probability.
        special: optional ``(B, T)`` boolean, ``True`` at positions never selected (padding,
            ``[CLS]``, ...).

    Returns:
        ``(inputs, targets)``, both ``(B, T)`` of the dtype of ``tokens``.

    Example:
        >>> x, y = mask_tokens(torch.tensor([[5, 6, 7]]), mask_id=1, vocab_size=8, p=1.0,
        ...                    generator=torch.Generator().manual_seed(0))
        >>> y.tolist()
        [[5, 6, 7]]
    """
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
    if special is not None and special.shape != tokens.shape:
        raise ValueError(f"special must have the shape of tokens {tuple(tokens.shape)}, got "
                         f"{tuple(special.shape)}")
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
        >>> logits = torch.zeros(1, 2, 4)
        >>> round(masked_lm_loss(logits, torch.tensor([[2, -100]])).item(), 4) == round(math.log(4), 4)
        True
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)} do not match targets (B, T) "
                         f"= {tuple(targets.shape)}")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor,
                    padding: torch.Tensor | None = None) -> torch.Tensor:
    r"""GPT's objective: predict token ``t+1`` from positions ``<= t``, mean over real targets.

    .. math:: \mathcal L = -\frac{1}{N} \sum_{b} \sum_{t=1}^{T-1} \log p_\theta(x_{b,t} \mid x_{b,<t})

    Args:
        logits: ``(B, T, V)`` from a causal model on ``tokens``.
        tokens: ``(B, T)`` the same sequence (the targets are the tokens shifted by one).
        padding: optional ``(B, T)``, ``True`` = real token; padded targets do not count.

    Example:
        >>> round(next_token_loss(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 2]])).item(), 4) == round(math.log(4), 4)
        True
    """
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)} do not match tokens (B, T) "
                         f"= {tuple(tokens.shape)}")
    targets = tokens[:, 1:]  # (B, T-1): the token after each position
    if padding is not None:
        targets = targets.masked_fill(~padding[:, 1:], IGNORE_INDEX)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(),
                           ignore_index=IGNORE_INDEX)


# --------------------------------------------------------------------------------------------
# The encoder-decoder model
# --------------------------------------------------------------------------------------------


class Transformer(nn.Module):
    """The encoder-decoder Transformer (Vaswani et al., 2017, figure 1).

    ``encode`` maps source ids to the memory, ``decode`` maps target prefixes and the memory to
    next-token logits, ``forward(src, src_padding, tgt)`` does both (teacher forcing; the
    argument order of chapter 1's :mod:`course_lib.seq2seq` models, so its
    ``teacher_forcing_loss``, ``exact_match`` and ``accuracy_by_length`` take this model too),
    ``make_step`` gives the ``step(tokens) -> logits`` callable that course_lib's greedy and beam
    decoders drive, and ``attention_maps`` returns every layer's and head's weights.

    Shapes:
        ``src`` ``(B, S)`` ids, ``src_padding`` ``(B, S)`` (``True`` = real token), ``tgt``
        ``(B, T)`` ids (starting with BOS). ``forward`` returns logits ``(B, T, V_tgt)``: row
        ``t`` predicts ``tgt[:, t+1]``.

    Example:
        >>> model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=12))
        >>> model(torch.randint(10, (2, 5)), None, torch.randint(12, (2, 4))).shape
        torch.Size([2, 4, 12])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        if c.tie_embeddings and c.src_vocab_size != c.tgt_vocab_size:
            raise ValueError(f"tie_embeddings needs one shared vocabulary; got src_vocab_size="
                             f"{c.src_vocab_size}, tgt_vocab_size={c.tgt_vocab_size}")
        self.config = c
        self.src_embed = Embedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout)
        self.tgt_embed = Embedding(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)
        self.lm_head = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.tie_embeddings:  # one matrix for both embeddings and the pre-softmax projection
            self.tgt_embed.tok.weight = self.src_embed.tok.weight
            self.lm_head.weight = self.src_embed.tok.weight

    def encode(self, src: torch.Tensor, src_padding: torch.Tensor | None = None,
               need_weights: bool = False) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Source ids ``(B, S)`` -> memory ``(B, S, d)`` and the encoder's weights per layer."""
        _check_padding(src_padding, src, "src_padding")
        mask = None if src_padding is None else key_padding_mask(src_padding)  # (B, 1, 1, S)
        return self.encoder(self.src_embed(src), mask, need_weights)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor,
               src_padding: torch.Tensor | None = None, need_weights: bool = False,
               ) -> tuple[torch.Tensor, list[tuple[torch.Tensor | None, torch.Tensor | None]]]:
        """Target ids ``(B, T)`` and memory ``(B, S, d)`` -> logits ``(B, T, V)``, weights."""
        if memory.dim() != 3 or memory.shape[0] != tgt.shape[0]:
            raise ValueError(f"memory must have shape (batch={tgt.shape[0]}, S, d), got "
                             f"{tuple(memory.shape)}")
        if src_padding is not None and src_padding.shape != memory.shape[:2]:
            raise ValueError(f"src_padding must have shape (batch, S) = {tuple(memory.shape[:2])}"
                             f", got {tuple(src_padding.shape)}")
        T = tgt.shape[1]
        self_mask = causal_mask(T, tgt.device)  # (T, T), broadcasts over batch and heads
        memory_mask = None if src_padding is None else key_padding_mask(src_padding)
        y, weights = self.decoder(self.tgt_embed(tgt), memory, self_mask, memory_mask,
                                  need_weights)
        return self.lm_head(y), weights  # (B, T, V)

    def forward(self, src: torch.Tensor, src_padding: torch.Tensor | None,
                tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: logits ``(B, T, V)``; the argument order of chapter 1's models."""
        memory, _ = self.encode(src, src_padding)
        logits, _ = self.decode(tgt, memory, src_padding)
        return logits

    @torch.no_grad()
    def attention_maps(self, src: torch.Tensor, tgt: torch.Tensor,
                       src_padding: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Every attention weight of one teacher-forced pass (dropout off for the call).

        Returns a dict of stacked weights: ``"encoder"`` ``(L_enc, B, h, S, S)``,
        ``"decoder_self"`` ``(L_dec, B, h, T, T)``, ``"decoder_cross"`` ``(L_dec, B, h, T, S)``.
        """
        was_training = self.training
        self.eval()
        try:
            memory, enc_w = self.encode(src, src_padding, need_weights=True)
            _, dec_w = self.decode(tgt, memory, src_padding, need_weights=True)
        finally:
            self.train(was_training)
        return {
            "encoder": torch.stack(enc_w),  # type: ignore[arg-type]
            "decoder_self": torch.stack([w[0] for w in dec_w]),  # type: ignore[misc]
            "decoder_cross": torch.stack([w[1] for w in dec_w]),  # type: ignore[misc]
        }

    @torch.no_grad()
    def make_step(self, src: torch.Tensor, src_padding: torch.Tensor | None = None,
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
        """Encode ``src`` once; return ``step(tokens (N, t)) -> next-token logits (N, V)``.

        ``N`` may be a multiple of the source batch ``B`` (beam search keeps ``k`` hypotheses
        per source, laid out source-major: rows ``b*k .. b*k+k-1`` belong to source ``b``);
        the memory is repeated to match. The step re-runs the decoder on the whole prefix (no
        key-value cache: simple, and fast enough for short outputs).
        """
        memory, _ = self.encode(src, src_padding)
        B = src.shape[0]

        @torch.no_grad()
        def step(tokens: torch.Tensor) -> torch.Tensor:
            N = tokens.shape[0]
            if N % B != 0:
                raise ValueError(f"step got {N} prefixes for {B} sources; expected a multiple")
            mem = memory.repeat_interleave(N // B, dim=0)  # (N, S, d)
            pad = None if src_padding is None else src_padding.repeat_interleave(N // B, dim=0)
            logits, _ = self.decode(tokens, mem, pad)
            return logits[:, -1]  # (N, V)

        return step


# --------------------------------------------------------------------------------------------
# Parameter counts by formula
# --------------------------------------------------------------------------------------------


def attention_params(d: int) -> int:
    """``4 d^2 + 4 d``: the query, key, value and output projections with biases."""
    return 4 * d * d + 4 * d


def feed_forward_params(d: int, d_ff: int) -> int:
    """``2 d d_ff + d_ff + d``: two linear maps with biases."""
    return 2 * d * d_ff + d_ff + d


def encoder_layer_params(d: int, d_ff: int) -> int:
    """``(4 d^2 + 4 d) + (2 d d_ff + d_ff + d) + 4 d``: attention, FFN, two LayerNorms."""
    return attention_params(d) + feed_forward_params(d, d_ff) + 2 * (2 * d)


def decoder_layer_params(d: int, d_ff: int) -> int:
    """``2 (4 d^2 + 4 d) + (2 d d_ff + d_ff + d) + 6 d``: two attentions, FFN, three LayerNorms."""
    return 2 * attention_params(d) + feed_forward_params(d, d_ff) + 3 * (2 * d)


def gpt_params_approx(d: int, n_layers: int) -> int:
    """``12 d^2 L``: a GPT-style stack with ``d_ff = 4 d``, biases, norms and embeddings left out.

    Each layer has ``4 d^2`` in attention and ``2 d (4 d) = 8 d^2`` in the feed-forward network.
    """
    return 12 * d * d * n_layers


def transformer_params(config: TransformerConfig) -> dict[str, int]:
    """The parameters of :class:`Transformer` by formula, part by part, and their ``"total"``.

    Embeddings: ``V d`` each (shared once when tied); the sinusoidal positions are a buffer, not
    parameters. Output layer: ``d V + V``. Final LayerNorms (pre-norm only): ``2 d`` each.

    Example:
        >>> c = TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, d_model=8, d_ff=16)
        >>> transformer_params(c)["total"] == sum(p.numel() for p in Transformer(c).parameters())
        True
    """
    c = config
    d = c.d_model
    parts = {
        "src_embedding": c.src_vocab_size * d,
        "tgt_embedding": 0 if c.tie_embeddings else c.tgt_vocab_size * d,
        "encoder_layers": c.n_encoder_layers * encoder_layer_params(d, c.d_ff),
        "decoder_layers": c.n_decoder_layers * decoder_layer_params(d, c.d_ff),
        "final_norms": (2 * 2 * d) if c.norm_first else 0,
        "output": (0 if c.tie_embeddings else d * c.tgt_vocab_size) + c.tgt_vocab_size,
    }
    parts["total"] = sum(parts.values())
    return parts


def count_parameters(module: nn.Module) -> int:
    """``sum(p.numel())`` over the distinct parameters (tied weights count once)."""
    return sum(p.numel() for p in module.parameters())


# --------------------------------------------------------------------------------------------
# Weight copying from torch.nn (the peer tests and the chapter's equivalence check)
# --------------------------------------------------------------------------------------------


def _copy_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    w_q, w_k, w_v = theirs.in_proj_weight.chunk(3, dim=0)
    b_q, b_k, b_v = theirs.in_proj_bias.chunk(3, dim=0)
    for lin, w, b in ((ours.q_proj, w_q, b_q), (ours.k_proj, w_k, b_k), (ours.v_proj, w_v, b_v),
                      (ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)):
        lin.weight.copy_(w)
        lin.bias.copy_(b)


@torch.no_grad()
def copy_from_torch_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    """Copy ``torch.nn.TransformerEncoderLayer`` weights into an :class:`EncoderLayer`."""
    _copy_mha(ours.self_attn, theirs.self_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    ours.norm1.load_state_dict(theirs.norm1.state_dict())
    ours.norm2.load_state_dict(theirs.norm2.state_dict())


@torch.no_grad()
def copy_from_torch_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    """Copy ``torch.nn.TransformerDecoderLayer`` weights (``multihead_attn`` -> ``cross_attn``)."""
    _copy_mha(ours.self_attn, theirs.self_attn)
    _copy_mha(ours.cross_attn, theirs.multihead_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for name in ("norm1", "norm2", "norm3"):
        getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())


@torch.no_grad()
def copy_from_torch_transformer(ours: Transformer, theirs: nn.Transformer) -> None:
    """Copy the encoder-decoder body of ``torch.nn.Transformer`` (layers and final norms).

    ``torch.nn.Transformer`` always ends both stacks with a LayerNorm; ours has them only when
    ``norm_first`` (post-norm layers already end normalised). Embeddings and the output layer
    are not part of ``torch.nn.Transformer``.
    """
    for a, b in zip(ours.encoder.layers, theirs.encoder.layers):
        copy_from_torch_encoder_layer(a, b)
    for a, b in zip(ours.decoder.layers, theirs.decoder.layers):
        copy_from_torch_decoder_layer(a, b)
    if ours.encoder.norm is not None:
        ours.encoder.norm.load_state_dict(theirs.encoder.norm.state_dict())
    if ours.decoder.norm is not None:
        ours.decoder.norm.load_state_dict(theirs.decoder.norm.state_dict())
