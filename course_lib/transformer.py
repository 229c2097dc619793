"""The Transformer (Vaswani et al., 2017), top to bottom as one model.

The feed-forward network read as a key-value memory (taught in chapter 3, section 1), the residual
sublayer with its LayerNorm before or after (section 2), the encoder and decoder layers and their
stacks (section 3), and the encoder-decoder with embeddings, positions and chapter 1's
``step(tokens) -> logits`` interface (section 4). Tested against
``torch.nn.TransformerEncoderLayer``, ``torch.nn.TransformerDecoderLayer`` and
``torch.nn.Transformer`` with copied weights (``tests/test_transformer.py``; the copying is
:mod:`course_lib.peers`). The encoder-only (BERT)
and decoder-only (GPT) masks and losses are :mod:`course_lib.lm`; parameter counts by formula are
:mod:`course_lib.counting`.

Conventions (as everywhere in course_lib): weights as ``nn.Linear`` stores them, ``y = x W^T + b``
with ``W`` shaped ``(out, in)``; boolean masks, ``True`` = "may attend"; padding masks ``(B, T)``
are ``True`` at real tokens. ``torch.nn``'s boolean masks mean the opposite (convert with ``~``).

Layer names follow ``torch.nn.Transformer*Layer`` (``self_attn``, ``norm1``, ``dropout1``, ...),
except that the feed-forward weights live in ``ff.linear1`` / ``ff.linear2`` and the decoder's
cross-attention is ``cross_attn`` (torch: ``multihead_attn``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import IMPLS, Impl, causal_mask
from course_lib.checks import check_float_tensor, check_ids, check_tensor
from course_lib.multihead import MultiHeadAttention
from course_lib.positional import sinusoidal_encoding

Weights = torch.Tensor | None  # attention weights (B, h, T_q, T_k), when asked for


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
    causal_decoder: bool = True  # False only for chapter 3's ablation: the decoder sees the future

    def __post_init__(self) -> None:
        if self.attn_impl not in IMPLS:  # an unknown path would fail only at the first forward
            raise ValueError(f"attn_impl must be 'reference' or 'fast', got {self.attn_impl!r}")


# --------------------------------------------------------------------------------------------
# 1. The feed-forward network, a key-value memory
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network (Vaswani et al., 2017, eq. 2), in ``nn.Linear`` layout.

    .. math:: \mathrm{FFN}(x) = \max(0,\, x W_1^\top + b_1)\, W_2^\top + b_2, \quad
              W_1 \in \mathbb{R}^{d_{ff} \times d},\; W_2 \in \mathbb{R}^{d \times d_{ff}}

    Read as a key-value memory (Geva et al., 2021): row ``i`` of ``linear1.weight`` is a key
    :math:`k_i`, column ``i`` of ``linear2.weight`` a value :math:`v_i`, and
    :math:`\mathrm{FFN}(x) = \sum_i \mathrm{relu}(x \cdot k_i + b_{1,i})\, v_i + b_2`: the
    memory coefficients (:meth:`memory_coefficients`) say how strongly each of the ``d_ff``
    memories is read.

    Shapes: ``(..., d) -> (..., d)``.

    Example:
        >>> ff = FeedForward(4, 8)
        >>> x = torch.randn(2, 3, 4)
        >>> ff(x).shape
        torch.Size([2, 3, 4])
        >>> as_memory = ff.memory_coefficients(x) @ ff.values + ff.linear2.bias
        >>> torch.allclose(as_memory, ff(x), atol=1e-6)
        True
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)  # rows of .weight: the keys
        self.linear2 = nn.Linear(d_ff, d_model)  # columns of .weight: the values
        self.dropout = nn.Dropout(dropout)

    def memory_coefficients(self, x: torch.Tensor) -> torch.Tensor:
        """``relu(x W_1^T + b_1)``: how strongly each memory fires, ``(..., d) -> (..., d_ff)``."""
        check_float_tensor("x", x, min_ndim=1, shape="(..., d)")
        if x.shape[-1] != self.linear1.in_features:
            raise ValueError(f"x must have shape (..., d={self.linear1.in_features}), got "
                             f"{tuple(x.shape)}")
        return F.relu(self.linear1(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear2(self.dropout(self.memory_coefficients(x)))
        return out

    @property
    def keys(self) -> torch.Tensor:
        """``(d_ff, d)``: row ``i`` is the key of memory ``i``."""
        return self.linear1.weight

    @property
    def values(self) -> torch.Tensor:
        """``(d_ff, d)``: row ``i`` is the value written by memory ``i`` (a column of ``W_2``)."""
        return self.linear2.weight.t()


# --------------------------------------------------------------------------------------------
# 2. The residual sublayer: LayerNorm after (post-norm) or before (pre-norm)
# --------------------------------------------------------------------------------------------


def sublayer(x: torch.Tensor, f: Callable[[torch.Tensor], tuple[torch.Tensor, Weights]],
             norm: nn.Module, dropout: nn.Module, norm_first: bool) -> tuple[torch.Tensor, Weights]:
    r"""Wrap ``f`` (attention or the FFN) in its residual connection and LayerNorm.

    .. math:: \text{post-norm: } x \leftarrow \mathrm{LN}(x + \mathrm{Drop}(f(x))), \qquad
              \text{pre-norm: } x \leftarrow x + \mathrm{Drop}(f(\mathrm{LN}(x)))

    ``f`` returns ``(output, attention weights or None)``; the weights are passed through.

    Example:
        >>> ln = nn.LayerNorm(2, elementwise_affine=False)
        >>> x = torch.tensor([[1.0, 3.0]])
        >>> pre, _ = sublayer(x, lambda z: (2 * z, None), ln, nn.Identity(), norm_first=True)
        >>> post, _ = sublayer(x, lambda z: (2 * z, None), ln, nn.Identity(), norm_first=False)
        >>> pre.round(decimals=3).tolist(), post.round(decimals=3).tolist()  # x + 2 LN(x), LN(3 x)
        ([[-1.0, 5.0]], [[-1.0, 1.0]])
    """
    check_float_tensor("x", x, min_ndim=1, shape="(..., d)")
    if norm_first:
        out, weights = f(norm(x))
        return x + dropout(out), weights
    out, weights = f(x)
    return norm(x + dropout(out)), weights


# --------------------------------------------------------------------------------------------
# 3. Encoder and decoder layers, and their stacks
# --------------------------------------------------------------------------------------------


def _check_stream(x: torch.Tensor, d_model: int, name: str) -> None:
    check_float_tensor(name, x)
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape (batch, length, d_model={d_model}), "
                         f"got {tuple(x.shape)}")


def _check_attn_mask(mask: torch.Tensor | None, target: tuple[int, ...], name: str) -> None:
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got {mask.dtype}")
    try:
        ok = torch.broadcast_shapes(mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to "
                         f"(batch, heads, queries, keys) = {target}")


class EncoderLayer(nn.Module):
    r"""One encoder layer: self-attention, then the FFN, each in a :func:`sublayer`.

    Equals ``torch.nn.TransformerEncoderLayer(batch_first=True, activation="relu")`` with the
    same weights (:func:`course_lib.peers.copy_from_torch_encoder_layer`).

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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, Weights]:
        _check_stream(x, self.d_model, "encoder layer input x")
        B, T, h = x.shape[0], x.shape[1], self.self_attn.n_heads
        _check_attn_mask(mask, (B, h, T, T), "encoder self-attention mask")
        x, weights = sublayer(
            x, lambda z: self.self_attn(z, z, z, mask=mask, need_weights=need_weights),
            self.norm1, self.dropout1, self.norm_first)
        x, _ = sublayer(x, lambda z: (self.ff(z), None), self.norm2, self.dropout2,
                        self.norm_first)
        return x, weights


class DecoderLayer(nn.Module):
    r"""One decoder layer: masked self-attention, cross-attention to the memory, the FFN.

    With :math:`m` the encoder output (the "memory"), three :func:`sublayer` s:
    :math:`\mathrm{SelfAttn}(y)` under ``self_mask`` (causal), :math:`\mathrm{Attn}(Q{=}y,
    K{=}V{=}m)` under ``memory_mask``, and :math:`\mathrm{FFN}(y)`. Equals
    ``torch.nn.TransformerDecoderLayer(batch_first=True, activation="relu")`` with the same
    weights (:func:`course_lib.peers.copy_from_torch_decoder_layer`).

    Shapes:
        ``y`` ``(B, T, d)``, ``memory`` ``(B, S, d)``; ``self_mask`` broadcastable to
        ``(B, h, T, T)``, ``memory_mask`` to ``(B, h, T, S)``. Returns ``(B, T, d)`` and, with
        ``need_weights``, ``(self_weights (B, h, T, T), cross_weights (B, h, T, S))``.

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
                need_weights: bool = False) -> tuple[torch.Tensor, tuple[Weights, Weights]]:
        _check_stream(y, self.d_model, "decoder layer input y")
        _check_stream(memory, self.d_model, "decoder layer memory")
        if memory.shape[0] != y.shape[0]:
            raise ValueError(f"memory batch {memory.shape[0]} differs from the decoder input "
                             f"batch {y.shape[0]} (memory {tuple(memory.shape)}, "
                             f"y {tuple(y.shape)})")
        B, T, S, h = y.shape[0], y.shape[1], memory.shape[1], self.self_attn.n_heads
        _check_attn_mask(self_mask, (B, h, T, T), "decoder self-attention mask self_mask")
        _check_attn_mask(memory_mask, (B, h, T, S), "decoder cross-attention mask memory_mask")
        y, w_self = sublayer(
            y, lambda z: self.self_attn(z, z, z, mask=self_mask, need_weights=need_weights),
            self.norm1, self.dropout1, self.norm_first)
        y, w_cross = sublayer(  # queries from the decoder, keys and values from the memory
            y, lambda z: self.cross_attn(z, memory, memory, mask=memory_mask,
                                         need_weights=need_weights),
            self.norm2, self.dropout2, self.norm_first)
        y, _ = sublayer(y, lambda z: (self.ff(z), None), self.norm3, self.dropout3,
                        self.norm_first)
        return y, (w_self, w_cross)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` s, with a final LayerNorm when ``norm_first``.

    Pre-norm layers leave the residual stream un-normalised, so the stack ends with a LayerNorm
    (as GPT-2 does). Post-norm layers already end with one; ``torch.nn.Transformer`` adds a
    final LayerNorm in both placements (:func:`course_lib.peers.copy_from_torch_transformer`).

    Shapes: ``x`` ``(B, S, d)``, ``mask`` broadcastable to ``(B, h, S, S)``. Returns ``(B, S, d)``
    and a list with each layer's weights (``None`` entries unless ``need_weights``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first,
                         c.layer_norm_eps, c.attn_impl) for _ in range(c.n_encoder_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, list[Weights]]:
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
        return (x if self.norm is None else self.norm(x)), weights


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer` s, with a final LayerNorm when ``norm_first``.

    Every layer attends to the same memory, the output of the *last* encoder layer. Returns
    ``(B, T, d)`` and a list with each layer's ``(self_weights, cross_weights)``.
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
                need_weights: bool = False) -> tuple[torch.Tensor, list[tuple[Weights, Weights]]]:
        weights = []
        for layer in self.layers:
            y, w = layer(y, memory, self_mask, memory_mask, need_weights=need_weights)
            weights.append(w)
        return (y if self.norm is None else self.norm(y)), weights


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


# --------------------------------------------------------------------------------------------
# 4. The encoder-decoder: embeddings, positions, the two stacks, the output layer
# --------------------------------------------------------------------------------------------


class Embedding(nn.Module):
    r"""Token embedding scaled by :math:`\sqrt{d}` plus sinusoidal positions, then dropout.

    .. math:: x_t = \sqrt{d}\; E[w_t] + PE_t

    Embeddings start at :math:`\mathcal N(0, 1/d)` so that the scaled embedding and the position
    code have comparable size. The position table (chapter 2) is a buffer: it moves with ``.to``
    and is never trained. ``positions=False`` leaves positions out.

    Shapes: ``(B, T)`` integer ids -> ``(B, T, d)``.

    Example:
        >>> Embedding(10, 8, max_len=16)(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 8])
    """

    pe: torch.Tensor  # (max_len, d) buffer

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float = 0.0,
                 positions: bool = True) -> None:
        super().__init__()
        self.d_model, self.vocab_size, self.max_len = d_model, vocab_size, max_len
        self.positions = positions
        self.tok = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tok.weight, std=d_model ** -0.5)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if check_tensor("tokens", tokens).dim() != 2:
            raise ValueError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"tokens must hold integer ids, got {tokens.dtype}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens have length {tokens.shape[1]} but the position table "
                             f"covers max_len={self.max_len}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens hold ids outside [0, {self.vocab_size}): "
                             f"min {int(tokens.min())}, max {int(tokens.max())}")
        x = self.tok(tokens) * math.sqrt(self.d_model)  # (B, T, d)
        if self.positions:
            x = x + self.pe[: tokens.shape[1]].to(x.dtype)
        out: torch.Tensor = self.dropout(x)
        return out


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
               need_weights: bool = False) -> tuple[torch.Tensor, list[Weights]]:
        """Source ids ``(B, S)`` -> memory ``(B, S, d)`` and the encoder's weights per layer."""
        check_ids("src", src, self.config.src_vocab_size, ndim=2, shape="(batch, length)")
        if src_padding is not None and (src_padding.dtype != torch.bool
                                        or src_padding.shape != src.shape):
            raise ValueError(f"src_padding must be boolean with the shape of the tokens "
                             f"{tuple(src.shape)}, got {src_padding.dtype} "
                             f"{tuple(src_padding.shape)}")
        mask = None if src_padding is None else key_padding_mask(src_padding)  # (B, 1, 1, S)
        encoded: tuple[torch.Tensor, list[Weights]] = self.encoder(
            self.src_embed(src), mask, need_weights)
        return encoded

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor,
               src_padding: torch.Tensor | None = None, need_weights: bool = False,
               ) -> tuple[torch.Tensor, list[tuple[Weights, Weights]]]:
        """Target ids ``(B, T)`` and memory ``(B, S, d)`` -> logits ``(B, T, V)``, weights."""
        check_ids("tgt", tgt, self.config.tgt_vocab_size, ndim=2, shape="(batch, length)")
        if memory.dim() != 3 or memory.shape[0] != tgt.shape[0]:
            raise ValueError(f"memory must have shape (batch={tgt.shape[0]}, S, d), got "
                             f"{tuple(memory.shape)}")
        if src_padding is not None and src_padding.shape != memory.shape[:2]:
            raise ValueError(f"src_padding must have shape (batch, S) = {tuple(memory.shape[:2])}"
                             f", got {tuple(src_padding.shape)}")
        T = tgt.shape[1]
        # (T, T), broadcast over batch and heads; the ablation lets every position see all.
        self_mask = causal_mask(T, tgt.device) if self.config.causal_decoder else None
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

        Returns stacked weights: ``"encoder"`` ``(L_enc, B, h, S, S)``, ``"decoder_self"``
        ``(L_dec, B, h, T, T)``, ``"decoder_cross"`` ``(L_dec, B, h, T, S)``.
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
