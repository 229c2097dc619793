r"""The modern decoder: Llama's block (RMSNorm, RoPE, SwiGLU, grouped-query attention), with
Mistral's sliding window and rolling cache and Mixtral's mixture-of-experts layers as options.

Taught in chapter 7 (the modern decoder): RoPE in section 1 (:mod:`course_lib.rope`), RMSNorm in
section 2, SwiGLU in section 3, grouped-query attention and the KV-cache budget in section 4, the
sliding window in section 5, MoE layers in section 6 (:mod:`course_lib.moe`). Touvron et al.
(2023), "LLaMA"; Jiang et al. (2023), "Mistral 7B"; Jiang et al. (2024), "Mixtral of Experts".

.. math:: h' = h + \mathrm{Attn}(\mathrm{RMSNorm}_1(h)), \qquad
          h_{\text{out}} = h' + \mathrm{SwiGLU}(\mathrm{RMSNorm}_2(h'))

**Parameter names** are those of Hugging Face's ``LlamaForCausalLM`` (``MistralForCausalLM``,
``MixtralForCausalLM``): ``model.embed_tokens``, ``model.layers.{i}.input_layernorm``,
``model.layers.{i}.self_attn.{q,k,v,o}_proj``, ``model.layers.{i}.post_attention_layernorm``,
``model.layers.{i}.mlp.{gate,up,down}_proj`` (or the MoE's ``mlp.gate`` and ``mlp.experts.*``),
``model.norm``, ``lm_head``, all ``nn.Linear`` ``(out, in)`` without biases: loading a Hugging
Face state dict is a plain ``load_state_dict``.

For the chapter's ladder (chapter 4's GPT block changed one piece at a time) three switches put
the old pieces back: ``position="learned"`` (a table ``model.embed_positions``, GPT-2's ``wpe``)
or ``"sinusoidal"`` (chapter 2's, added to the input, scaled by ``init_std``), ``norm="layer"``
(LayerNorm with a bias) and ``mlp="gelu"`` (``down_proj(GELU(up_proj x))``);
``num_key_value_heads`` equal to the number of heads is multi-head attention, 1 is multi-query
attention (Shazeer, 2019), in between is grouped-query attention (Ainslie et al., 2023).

The model maps ``(B, T)`` ids to ``(B, T, V)`` logits; with a :class:`KVCache` it runs only the new
tokens. With ``sliding_window = W`` a query attends to itself and the ``W - 1`` keys before it
(Hugging Face's convention), and the cache keeps the last ``W`` keys and values of each layer:
its memory stops growing at ``W`` positions (the rolling cache).
"""

from __future__ import annotations

import json
import lzma
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks import (
    check_finite,
    check_float_tensor,
    check_ids,
    check_int,
    check_int_tensor,
    check_positive,
)
from course_lib.moe import SparseMoeBlock
from course_lib.positional import sinusoidal_encoding
from course_lib.rope import Pairing, apply_rope


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of :class:`LlamaForCausalLM`; names as Hugging Face's ``LlamaConfig``.

    The defaults are a small model; :data:`LLAMA3_8B` holds Llama 3 8B's numbers.
    """

    vocab_size: int = 256  # token ids
    hidden_size: int = 64  # model width d
    intermediate_size: int = 172  # MLP hidden width (SwiGLU: about 2/3 of 4d)
    num_hidden_layers: int = 2  # blocks L
    num_attention_heads: int = 4  # query heads h
    num_key_value_heads: int = 4  # key/value heads g (h: MHA, 1: MQA, between: GQA); divides h
    head_dim: int | None = None  # per-head width (None: hidden_size // num_attention_heads)
    rms_norm_eps: float = 1e-5  # epsilon inside the square root of RMSNorm (and LayerNorm's)
    rope_theta: float = 10000.0  # base of RoPE's frequencies (Llama 3: 500000)
    rope_pairing: Pairing = "half"  # Hugging Face's layout; "interleaved" is the paper's
    rope_scale: float = 1.0  # position interpolation: positions divided by this
    max_position_embeddings: int = 2048  # rows of the learned position table (position="learned")
    sliding_window: int | None = None  # W: attend to the last W positions (Mistral); None: all
    num_local_experts: int = 0  # E > 0: every MLP is a mixture of E experts (Mixtral)
    num_experts_per_tok: int = 2  # k of top-k routing
    tie_word_embeddings: bool = False  # lm_head shares embed_tokens' matrix
    position: Literal["rope", "learned", "sinusoidal", "none"] = "rope"  # ladder switch
    norm: Literal["rms", "layer"] = "rms"  # ladder switch
    mlp: Literal["swiglu", "gelu"] = "swiglu"  # ladder switch
    init_std: float = 0.02  # normal initialisation of every matrix

    def __post_init__(self) -> None:
        """Refuse a configuration that would build a wrong model silently or crash in torch.

        Example:
            >>> LlamaConfig(sliding_window=0)
            Traceback (most recent call last):
            ...
            ValueError: sliding_window must be a positive integer, got 0
        """
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                     "num_experts_per_tok"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("num_local_experts", self.num_local_experts, minimum=0)
        for name in ("head_dim", "sliding_window"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=1)
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(f"num_key_value_heads={self.num_key_value_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads}")
        if self.num_local_experts and self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} exceeds the "
                             f"num_local_experts={self.num_local_experts}")
        if self.position == "rope" and self.d_head % 2:
            raise ValueError(f"RoPE rotates pairs of features: head_dim must be even, got "
                             f"{self.d_head} (hidden_size / num_attention_heads)")
        for name, allowed in (("position", ("rope", "learned", "sinusoidal", "none")),
                              ("norm", ("rms", "layer")), ("mlp", ("swiglu", "gelu")),
                              ("rope_pairing", ("interleaved", "half"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got "
                                 f"{getattr(self, name)!r}")
        for name in ("rope_theta", "rope_scale", "init_std"):
            check_positive(name, getattr(self, name))
        if check_finite("rms_norm_eps", self.rms_norm_eps) < 0:
            raise ValueError(f"rms_norm_eps must be >= 0, got {self.rms_norm_eps}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise TypeError(f"tie_word_embeddings must be a bool, got "
                            f"{type(self.tie_word_embeddings).__name__}")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


#: Llama 3 8B's shape (Grattafiori et al., 2024): 32 layers, 32 query heads, 8 key/value heads.
LLAMA3_8B = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                        rope_theta=500000.0, max_position_embeddings=131072)


def kv_cache_bytes(config: LlamaConfig, seq_len: int, batch_size: int = 1,
                   bytes_per_value: int = 2) -> int:
    r"""Bytes of the key-value cache: :math:`2 \cdot L \cdot g \cdot d_h \cdot n \cdot B \cdot b`.

    Keys and values (2), per layer (:math:`L`), per key/value head (:math:`g`), per feature
    (:math:`d_h`), per cached position (:math:`n`: the context, or the window :math:`W` when it
    is smaller), per sequence (:math:`B`), :math:`b` bytes per number (bf16: 2).

    Example:
        >>> kv_cache_bytes(LLAMA3_8B, seq_len=8192) == 2**30  # 1 GiB at 8k context in bf16
        True
    """
    if not isinstance(config, LlamaConfig):
        raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
    check_int("seq_len", seq_len, minimum=0)
    check_int("batch_size", batch_size, minimum=1)
    check_int("bytes_per_value", bytes_per_value, minimum=1)
    cached = seq_len if config.sliding_window is None else min(seq_len, config.sliding_window)
    return (2 * config.num_hidden_layers * config.num_key_value_heads * config.d_head * cached
            * batch_size * bytes_per_value)


def kv_cache_design(budget_bytes: int, context: int, n_layers: int, n_heads: int,
                    head_dim: int, batch_size: int = 1,
                    bytes_per_value: int = 2) -> tuple[int, int | None] | None:
    r"""The key/value heads and sliding window that fit a context's cache into a budget.

    A design is ``(g, window)``: ``g`` key/value heads (a divisor of ``n_heads``) and ``window``
    ``None`` (full attention) or ``W`` with ``1 <= W < context``. It is admissible when the
    cache after ``context`` tokens of ``batch_size`` sequences,
    :math:`2 \cdot L \cdot g \cdot d_h \cdot \min(n, W) \cdot B \cdot b` bytes, is at most
    ``budget_bytes``, and, with a window, every token of the context can still reach the last
    position through the ``n_layers`` windows, :math:`L (W - 1) \ge n - 1`. The best admissible
    design: full attention with the most key/value heads if full attention fits at all;
    otherwise the most key/value heads with a window, and at those the longest window. ``None``
    when no design is admissible.

    Example:
        >>> kv_cache_design(2**30, 8192, 32, 32, 128)  # Llama 3 8B's shape: 1 GiB at 8k tokens
        (8, None)
        >>> kv_cache_design(2**25, 8192, 32, 32, 128)  # 32 MiB: a window, reach 32 x 511
        (4, 512)
    """
    for name, value in (("budget_bytes", budget_bytes), ("context", context),
                        ("n_layers", n_layers), ("n_heads", n_heads), ("head_dim", head_dim),
                        ("batch_size", batch_size), ("bytes_per_value", bytes_per_value)):
        check_int(name, value, minimum=1)
    per_position = 2 * n_layers * head_dim * batch_size * bytes_per_value  # per key/value head
    shortest = 1 + -(-(context - 1) // n_layers)  # the least W with L (W - 1) >= n - 1
    divisors = sorted((g for g in range(1, n_heads + 1) if n_heads % g == 0), reverse=True)
    for g in divisors:  # full attention first: it sees every token directly
        if per_position * g * context <= budget_bytes:
            return g, None
    for g in divisors:
        longest = min(budget_bytes // (per_position * g), context - 1)  # positions that fit
        if longest >= shortest:
            return g, longest
    return None


class RMSNorm(nn.Module):
    r""":math:`x / \sqrt{\mathrm{mean}(x^2) + \epsilon} \cdot g` over the last axis (Zhang and
    Sennrich, 2019).

    Unlike LayerNorm it subtracts no mean and has no bias: one reduction instead of two.

    Example:
        >>> norm = RMSNorm(4, eps=0.0)
        >>> norm(torch.tensor([[3.0, -3.0, 3.0, -3.0]])).tolist()
        [[1.0, -1.0, 1.0, -1.0]]
    """

    def __init__(self, hidden_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_stream(x, self.weight.shape[0], any_rank=True)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _check_stream(x: torch.Tensor, d: int, any_rank: bool = False) -> None:
    """``x`` is the residual stream: floats ``(B, T, d)`` (``(..., d)`` with ``any_rank``)."""
    layout = f"(..., hidden_size={d})" if any_rank else f"(batch, length, hidden_size={d})"
    check_float_tensor("x", x, ndim=None if any_rank else 3, min_ndim=1, shape=layout)
    if x.shape[-1] != d:
        raise ValueError(f"x must have shape {layout}, got shape {tuple(x.shape)}")


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(B, g, T, d) -> (B, g * n_rep, T, d)``: query head ``j`` reads key/value head
    ``j // n_rep``.

    Each key/value head serves ``n_rep`` consecutive query heads (Hugging Face's ``repeat_kv``).

    Example:
        >>> repeat_kv(torch.tensor([10.0, 20.0]).view(1, 2, 1, 1), 2).flatten().tolist()
        [10.0, 10.0, 20.0, 20.0]
    """
    check_float_tensor("x", x, ndim=4, shape="(B, g, T, d)")
    check_int("n_rep", n_rep, minimum=1)
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def attention_mask(q_pos: torch.Tensor, k_pos: torch.Tensor,
                   window: int | None = None) -> torch.Tensor:
    """``(T_q, T_k)`` bool, True where key position ``<=`` query position (and within the window).

    Example:
        >>> attention_mask(torch.arange(4), torch.arange(4), window=2).int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    check_int_tensor("q_pos", q_pos, ndim=1, shape="(T_q,)")
    check_int_tensor("k_pos", k_pos, ndim=1, shape="(T_k,)")
    if window is not None:
        check_int("window", window, minimum=1)
    allowed = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= k_pos[None, :] > q_pos[:, None] - window
    return allowed


class KVCache:
    """Per layer, the keys (already rotated) and values of the positions kept: ``(B, g, n, d_h)``.

    With ``window = W`` it keeps the last ``W`` positions of each layer (the rolling cache of a
    sliding-window model), so its memory stays constant however long the generation.

    Example:
        >>> cache = KVCache(n_layers=1, window=3)
        >>> for _ in range(5):
        ...     k, v, pos = cache.update(0, torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
        >>> cache.seen, tuple(cache.keys[0].shape), cache.positions[0].tolist()
        (5, (1, 2, 3, 4), [2, 3, 4])
    """

    def __init__(self, n_layers: int, window: int | None = None) -> None:
        check_int("n_layers", n_layers, minimum=1)
        if window is not None:
            check_int("window", window, minimum=1)
        self.window = window
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.positions: list[torch.Tensor | None] = [None] * n_layers
        self.seen = 0  # positions processed so far (the next token's position)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add ``T`` new positions; return every key, value and key position to attend to."""
        if not 0 <= check_int("layer", layer) < len(self.keys):
            raise ValueError(f"layer must be an index in [0, {len(self.keys)}), the cache's "
                             f"layers, got {layer}")
        check_float_tensor("k", k, ndim=4, shape="(B, g, T, d_h)")
        check_float_tensor("v", v, ndim=4, shape="(B, g, T, d_h)")
        if v.shape != k.shape:
            raise ValueError(f"k and v must have one shape (B, g, T, d_h), got {tuple(k.shape)} "
                             f"and {tuple(v.shape)}")
        held = next((t for t in self.keys if t is not None), None)
        if held is not None and (k.shape[0], k.shape[1], k.shape[3]) != (
                held.shape[0], held.shape[1], held.shape[3]):
            raise ValueError(f"k has shape {tuple(k.shape)} but the cache holds keys of batch "
                             f"size {held.shape[0]}, {held.shape[1]} heads of width "
                             f"{held.shape[3]}: start a new cache for another batch or model")
        start = self.seen
        new_pos = torch.arange(start, start + k.shape[2], device=k.device)
        old_k, old_v, old_p = self.keys[layer], self.values[layer], self.positions[layer]
        if old_k is not None and old_v is not None and old_p is not None:
            k, v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
            new_pos = torch.cat([old_p, new_pos])
        keep = slice(None) if self.window is None else slice(-self.window, None)
        self.keys[layer], self.values[layer] = k[:, :, keep], v[:, :, keep]
        self.positions[layer] = new_pos[keep]
        if layer == len(self.keys) - 1:
            self.seen += k.shape[2] - (0 if old_k is None else old_k.shape[2])
        return k, v, new_pos

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class LlamaAttention(nn.Module):
    """Causal self-attention with RoPE on q and k and ``g`` key/value heads shared by ``h`` query
    heads.

    Shapes: ``(B, T, d) -> (B, T, d)``; ``q_proj`` ``(h d_h, d)``, ``k_proj``/``v_proj``
    ``(g d_h, d)``, ``o_proj`` ``(d, h d_h)``.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        h, g, dh, d = (config.num_attention_heads, config.num_key_value_heads, config.d_head,
                       config.hidden_size)
        if h % g != 0:
            raise ValueError(f"num_key_value_heads={g} must divide num_attention_heads={h}")
        self.config = config
        self.q_proj = nn.Linear(d, h * dh, bias=False)
        self.k_proj = nn.Linear(d, g * dh, bias=False)
        self.v_proj = nn.Linear(d, g * dh, bias=False)
        self.o_proj = nn.Linear(h * dh, d, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None, layer: int,
                start: int) -> torch.Tensor:
        c = self.config
        _check_stream(x, c.hidden_size)
        check_int("layer", layer, minimum=0)
        check_int("start", start, minimum=0)
        B, T, _ = x.shape
        h, g, dh = c.num_attention_heads, c.num_key_value_heads, c.d_head
        q = self.q_proj(x).view(B, T, h, dh).transpose(1, 2)  # (B, h, T, d_h)
        k = self.k_proj(x).view(B, T, g, dh).transpose(1, 2)  # (B, g, T, d_h)
        v = self.v_proj(x).view(B, T, g, dh).transpose(1, 2)  # (B, g, T, d_h)
        q_pos = torch.arange(start, start + T, device=x.device)
        if c.position == "rope":  # rotate q and k (never v) by their absolute positions
            q = apply_rope(q, q_pos, c.rope_theta, c.rope_pairing, c.rope_scale)
            k = apply_rope(k, q_pos, c.rope_theta, c.rope_pairing, c.rope_scale)
        k_pos = q_pos
        if cache is not None:
            k, v, k_pos = cache.update(layer, k, v)  # (B, g, n, d_h)
        k, v = repeat_kv(k, h // g), repeat_kv(v, h // g)  # (B, h, n, d_h)
        mask = attention_mask(q_pos, k_pos, c.sliding_window)  # (T, n)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, T, d_h)
        out: torch.Tensor = self.o_proj(y.transpose(1, 2).reshape(B, T, h * dh))  # (B, T, d)
        return out


class LlamaMLP(nn.Module):
    r"""SwiGLU (Shazeer, 2020):
    :math:`W_{\text{down}}(\mathrm{SiLU}(W_{\text{gate}} x) \odot W_{\text{up}} x)`.

    With ``mlp="gelu"`` it is GPT's MLP, :math:`W_{\text{down}}\,\mathrm{GELU}(W_{\text{up}} x)`.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        d, i = config.hidden_size, config.intermediate_size
        self.kind = config.mlp
        if self.kind == "swiglu":
            self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_stream(x, self.up_proj.in_features, any_rank=True)
        if self.kind == "swiglu":
            out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        else:
            out = self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))
        return out


def _norm(config: LlamaConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.hidden_size, config.rms_norm_eps)
    return nn.LayerNorm(config.hidden_size, eps=config.rms_norm_eps)


class LlamaDecoderLayer(nn.Module):
    """One pre-norm block: attention, then the MLP (dense SwiGLU, or a mixture of experts)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = _norm(config)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = _norm(config)
        self.mlp: nn.Module = (SparseMoeBlock(config.hidden_size, config.intermediate_size,
                                              config.num_local_experts, config.num_experts_per_tok)
                               if config.num_local_experts > 0 else LlamaMLP(config))

    def forward(self, x: torch.Tensor, cache: KVCache | None, layer: int,
                start: int) -> torch.Tensor:
        _check_stream(x, self.self_attn.config.hidden_size)
        x = x + self.self_attn(self.input_layernorm(x), cache, layer, start)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


def _check_cache(cache: KVCache, config: LlamaConfig) -> None:
    """A cache of this model: one layer per block, and every key the window attends to kept."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
    if len(cache.keys) != config.num_hidden_layers:  # with more, cache.seen would never advance
        raise ValueError(f"cache must hold one layer per block ({config.num_hidden_layers}), "
                         f"got {len(cache.keys)}")
    window = config.sliding_window
    if cache.window is not None and (window is None or cache.window < window):
        raise ValueError(f"cache keeps the last {cache.window} positions but the model attends "
                         f"to {'all' if window is None else f'the last {window}'}: keys would "
                         "be lost")


class LlamaModel(nn.Module):
    """The embeddings, the blocks and the final norm (Hugging Face's ``model.`` prefix)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.position == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings,
                                                config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config)
                                    for _ in range(config.num_hidden_layers))
        self.norm = _norm(config)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        check_ids("ids", ids, self.config.vocab_size, ndim=2, shape="(batch, length)")
        if cache is not None:
            _check_cache(cache, self.config)
        start = 0 if cache is None else cache.seen
        T = ids.shape[1]
        x = self.embed_tokens(ids)  # (B, T, d)
        pos = torch.arange(start, start + T, device=ids.device)
        if self.config.position == "learned" and start + T > self.config.max_position_embeddings:
            raise ValueError(f"ids reach position {start + T - 1} (with the cache's {start} "
                             f"earlier), past the learned table's max_position_embeddings="
                             f"{self.config.max_position_embeddings} rows")
        if self.config.position == "learned":
            x = x + self.embed_positions(pos)
        elif self.config.position == "sinusoidal":
            # Scaled to the embeddings' initial scale, as the learned table starts: unscaled
            # sinusoids (entries up to 1) would drown token embeddings drawn at std 0.02.
            table = self.config.init_std * sinusoidal_encoding(start + T, self.config.hidden_size)
            x = x + table[start:].to(device=x.device, dtype=x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache, i, start)
        out: torch.Tensor = self.norm(x)
        return out


class LlamaForCausalLM(nn.Module):
    """A Llama / Mistral / Mixtral decoder (see the module docstring for names and options).

    Example:
        >>> cfg = LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=40,
        ...                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        >>> model = LlamaForCausalLM(cfg)
        >>> ids = torch.randint(11, (2, 6))
        >>> model(ids).shape
        torch.Size([2, 6, 11])
        >>> cache = KVCache(2)
        >>> steps = [model(ids[:, t:t + 1], cache)[:, -1] for t in range(6)]
        >>> torch.allclose(torch.stack(steps, 1), model(ids), atol=1e-5)
        True
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        logits: torch.Tensor = self.lm_head(self.model(ids, cache))  # (B, T, V)
        return logits

    def new_cache(self) -> KVCache:
        """An empty cache (rolling when the model has a sliding window)."""
        return KVCache(self.config.num_hidden_layers, self.config.sliding_window)

    def router_logits(self) -> list[torch.Tensor]:
        """The last forward pass's router logits of every MoE layer (``(B*T, E)`` each)."""
        return [layer.mlp.router_logits for layer in self.model.layers
                if isinstance(layer.mlp, SparseMoeBlock) and layer.mlp.router_logits is not None]


def num_params(model: nn.Module) -> int:
    """Distinct parameters (a tied matrix counted once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def generate(model: LlamaForCausalLM, prompt: torch.Tensor, max_new_tokens: int,
             use_cache: bool = True) -> torch.Tensor:
    """Greedy generation: ``(B, T)`` prompt -> ``(B, T + max_new_tokens)``.

    With the cache each step runs the new token only (with a sliding window, the rolling cache);
    without it each step reruns the whole sequence. Both give the same tokens.

    Example:
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=7, hidden_size=8, intermediate_size=16,
        ...                                      num_attention_heads=2, num_key_value_heads=1))
        >>> p = torch.tensor([[1, 2, 3]])
        >>> torch.equal(generate(model, p, 5), generate(model, p, 5, use_cache=False))
        True
    """
    check_ids("prompt", prompt, model.config.vocab_size, ndim=2, shape="(B, T)")
    if prompt.shape[1] == 0:
        raise ValueError(f"prompt must hold at least one token per row, got shape "
                         f"{tuple(prompt.shape)}")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    tokens = prompt
    cache = model.new_cache() if use_cache else None
    new = prompt
    for _ in range(max_new_tokens):
        logits = model(new if use_cache else tokens, cache)[:, -1]  # (B, V)
        nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        new = nxt
    return tokens


def step_fn(model: LlamaForCausalLM) -> Callable[[torch.Tensor], torch.Tensor]:
    """The course's decoding interface: prefixes ``(B, t)`` -> next-token logits ``(B, V)``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return lambda tokens: model(tokens)[:, -1]


def swiglu_width(hidden_size: int, multiple_of: int = 1) -> int:
    r"""SwiGLU's hidden width with the parameters of a :math:`4d` GELU MLP:
    :math:`\tfrac23 \cdot 4d`.

    Three matrices of :math:`d \times w` cost what two of :math:`d \times 4d` cost when
    :math:`w = 8d/3`; Llama rounds it up to a multiple of ``multiple_of``.

    Example:
        >>> swiglu_width(4096, multiple_of=256)  # Llama 1 7B
        11008
    """
    check_int("hidden_size", hidden_size, minimum=1)
    check_int("multiple_of", multiple_of, minimum=1)
    width = 8 * hidden_size / 3
    return int(multiple_of * math.ceil(width / multiple_of))


#: The ladder's runs (section 8), made by ``scripts/modern_decoder_runs.py``.
RUNS_PATH = Path(__file__).resolve().parent / "data" / "modern_decoder_runs.json.xz"


def load_runs(path: Path = RUNS_PATH) -> dict[str, Any]:
    """The shipped results of ``scripts/modern_decoder_runs.py`` (``MODERN_DECODER_RUNS.md``)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run scripts/modern_decoder_runs.py")
    runs: dict[str, Any] = json.loads(lzma.decompress(path.read_bytes()).decode("utf-8"))
    return runs
