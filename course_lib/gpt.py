r"""A decoder-only Transformer language model: GPT-2's architecture, readable top to bottom.

Taught in chapter 4 (language models), sections 2 (the model), 3 (the key-value cache) and 4
(training on the Shakespeare corpus). Radford et al. (2019), "Language Models are Unsupervised
Multitask Learners", section 2.3 and OpenAI's ``gpt-2/src/model.py``:

.. math:: h_0 = W_{te}[x] + W_{pe}[0..T), \quad
          h_l = h_{l-1}' + \mathrm{MLP}(\mathrm{LN}_2(h_{l-1}')), \;
          h_{l-1}' = h_{l-1} + \mathrm{Attn}(\mathrm{LN}_1(h_{l-1})), \quad
          \text{logits} = \mathrm{LN}_f(h_L)\, W_{te}^\top

Pre-norm blocks, causal self-attention through :func:`course_lib.attention.
scaled_dot_product_attention`'s fast path, a GELU MLP (GPT-2's tanh approximation,
:func:`gelu_tanh`), a final LayerNorm, and the output layer tied to the token embedding.

**Parameter names** are those of GPT-2 checkpoints as Hugging Face's ``GPT2LMHeadModel`` names
them: ``transformer.wte``, ``transformer.wpe``, ``transformer.h.{i}.ln_1``,
``transformer.h.{i}.attn.c_attn`` (query, key and value in one ``d -> 3d`` map, in that order),
``transformer.h.{i}.attn.c_proj``, ``transformer.h.{i}.ln_2``, ``transformer.h.{i}.mlp.c_fc``,
``transformer.h.{i}.mlp.c_proj``, ``transformer.ln_f``, ``lm_head``. GPT-2's four projections are
``Conv1D`` modules whose weights are stored ``(in, out)`` (``y = x W + b``); ours are ``nn.Linear``
(``y = x W^T + b``, weights ``(out, in)``, the course's one convention), so those four weights are
transposed on the way in and out (:func:`to_gpt2_state_dict`, :func:`from_gpt2_state_dict`).
Every other tensor keeps its shape.

The model exposes the course's decoding interface: :meth:`GPT.step` maps prefixes ``(B, t)`` to
next-token logits ``(B, V)``, so :mod:`course_lib.decoding`'s greedy and beam search and
:mod:`course_lib.sampling` drive it; :meth:`GPT.cached_step` gives the same with a key-value cache
(:class:`KVCache`): each call runs the new token only, attending to the cached keys and values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import IMPLS, Impl, causal_mask, scaled_dot_product_attention
from course_lib.checks import check_float_tensor, check_ids, check_int_tensor, check_tensor
from course_lib.multihead import merge_heads, split_heads

CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                  "mlp.c_proj.weight")  # stored (in, out) in GPT-2 checkpoints
#: The dtypes ``F.cross_entropy`` takes as class targets.
TARGET_DTYPES = (torch.long, torch.uint8)

if TYPE_CHECKING:
    class GPTModules(nn.ModuleDict):
        """The entries of ``GPT.transformer``, for the type checker only.

        At run time ``GPT.transformer`` is a plain ``nn.ModuleDict``, whose entries mypy sees as
        ``Tensor | Module``; this declares what they are.
        """

        wte: nn.Embedding
        wpe: nn.Embedding
        drop: nn.Dropout
        h: nn.ModuleList  # of Block
        ln_f: nn.LayerNorm


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of :class:`GPT`; the defaults are GPT-2 small (124M parameters)."""

    vocab_size: int = 50257  # token ids: GPT-2's 256 bytes + 50,000 merges + <|endoftext|>
    block_size: int = 1024  # context length (GPT-2's n_ctx): rows of the position table wpe
    n_layer: int = 12  # Transformer blocks L
    n_head: int = 12  # attention heads per block; must divide n_embd
    n_embd: int = 768  # model width d (each head has d / n_head features)
    dropout: float = 0.0  # on embeddings, attention weights and residual branches (GPT-2: 0.1)
    bias: bool = True  # biases in the Linear layers and LayerNorms (GPT-2 has them)
    layer_norm_eps: float = 1e-5  # LayerNorm epsilon (GPT-2's)
    attn_impl: Impl = "fast"  # course_lib.attention path: "fast" (fused SDPA) or "reference"

    def __post_init__(self) -> None:
        if self.attn_impl not in IMPLS:  # an unknown path would fail only at the first forward
            raise ValueError(f"attn_impl must be 'reference' or 'fast', got {self.attn_impl!r}")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    r"""GELU, GPT-2's tanh approximation (Hendrycks and Gimpel, 2016).

    .. math:: \mathrm{GELU}(x) \approx \tfrac12 x \left(1 + \tanh\!\left(\sqrt{2/\pi}\,
              (x + 0.044715\, x^3)\right)\right)

    Example:
        >>> x = torch.linspace(-3, 3, 7, dtype=torch.float64)
        >>> manual = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        >>> torch.allclose(gelu_tanh(x), manual)
        True
    """
    check_float_tensor("x", x)
    return F.gelu(x, approximate="tanh")


def _check_stream(x: torch.Tensor, d: int, *, any_rank: bool = False) -> None:
    """``x`` is the residual stream: floats ``(B, T, d)`` (``(..., d)`` with ``any_rank``)."""
    layout = f"(..., n_embd={d})" if any_rank else f"(batch, length, n_embd={d})"
    check_float_tensor("x", x, ndim=None if any_rank else 3, min_ndim=1, shape=layout)
    if x.shape[-1] != d:
        raise ValueError(f"x must have shape {layout}, got shape {tuple(x.shape)}")


class KVCache:
    """The keys and values of every position seen so far, per layer: ``(B, h, T_cached, d_head)``.

    Generating token ``t + 1`` needs the keys and values of positions ``0..t``; they do not
    change when a token is appended (attention is causal), so they are computed once and kept.

    Example:
        >>> cache = KVCache(n_layer=2)
        >>> k, v = cache.update(0, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> k.shape, len(cache)
        (torch.Size([1, 2, 3, 4]), 3)
    """

    def __init__(self, n_layer: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layer
        self.values: list[torch.Tensor | None] = [None] * n_layer

    def __len__(self) -> int:
        """The number of cached positions."""
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' ``k, v`` ``(B, h, T_new, d_head)``; return all of them."""
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None and old_v is not None:
            k, v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def select(self, rows: torch.Tensor) -> None:
        """Keep batch rows ``rows`` (in that order), e.g. the hypotheses beam search kept."""
        self.keys = [None if k is None else k[rows] for k in self.keys]
        self.values = [None if v is None else v[rows] for v in self.values]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one ``c_attn`` map for queries, keys and values.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``. With a cache holding ``P`` positions, ``x``
    holds positions ``P..P+T-1`` and attends to all ``P + T`` keys.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ValueError(f"n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.attn_impl = config.attn_impl
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None,
                layer: int = 0) -> torch.Tensor:
        _check_stream(x, self.n_embd)
        T = x.shape[1]
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=-1)  # 3 x (B, T, d)
        q, k, v = (split_heads(t, self.n_head) for t in (q, k, v))  # (B, h, T, d_head)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, h, P + T, d_head)
        n_keys = k.shape[2]
        # A single new token may attend to every cached key: no mask needed.
        mask = None if T == 1 else causal_mask(T, x.device, n_keys=n_keys)  # (T, P + T)
        y = scaled_dot_product_attention(q, k, v, mask, impl=self.attn_impl,
                                         dropout_p=self.dropout if self.training else 0.0)
        out: torch.Tensor = self.resid_dropout(self.c_proj(merge_heads(y)))  # (B, T, d)
        return out


class MLP(nn.Module):
    """``c_proj(GELU_tanh(c_fc(x)))`` with hidden width ``4 d``; ``(B, T, d) -> (B, T, d)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_embd = config.n_embd
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_stream(x, self.n_embd, any_rank=True)
        out: torch.Tensor = self.dropout(self.c_proj(gelu_tanh(self.c_fc(x))))
        return out


class Block(nn.Module):
    r"""A pre-norm block: :math:`x + \mathrm{Attn}(\mathrm{LN}_1 x)`, then
    :math:`+\,\mathrm{MLP}(\mathrm{LN}_2 x)`."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None,
                layer: int = 0) -> torch.Tensor:
        _check_stream(x, self.attn.n_embd)
        x = x + self.attn(self.ln_1(x), cache, layer)
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT(nn.Module):
    """GPT-2's decoder-only language model (see the module docstring for names and shapes).

    Example:
        >>> model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
        >>> model(torch.randint(11, (3, 5))).shape  # (B, T) ids -> (B, T, V) logits
        torch.Size([3, 5, 11])
        >>> gpt_params(model.config)["total"] == sum(p.numel() for p in model.parameters())
        True
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = cast("GPTModules", nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
            wpe=nn.Embedding(config.block_size, config.n_embd),  # learned position embeddings
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias),
        )))  # a plain ModuleDict; the cast only names its entries' types (GPTModules)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying: one (V, d) matrix
        self.apply(self._init_weights)
        # GPT-2 (section 2.3): residual projections scaled by 1/sqrt(N), N = 2 L residual
        # branches, so the residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        # GPT-2's initialisation (OpenAI's model.py): N(0, 0.02) weights, zero biases, positions
        # N(0, 0.01); LayerNorms start as the identity (torch's default).
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            std = 0.01 if module is self.transformer.wpe else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits ``(B, T, V)`` of the next token at each position of ``idx`` ``(B, T)``.

        With a ``cache`` holding ``P`` positions, ``idx`` holds positions ``P..P+T-1``; the cache
        is extended with their keys and values.

        Raises:
            ValueError: ``idx`` not ``(B, T)`` long or int32, an id outside ``[0, vocab_size)``
                (the embedding has no row for it), more positions than ``block_size``.
        """
        check_tensor("idx", idx, shape="(batch, length)")
        if idx.dim() != 2 or idx.dtype not in (torch.long, torch.int32):
            raise ValueError(f"idx must be (batch, length) integer ids, got {idx.dtype} of shape "
                             f"{tuple(idx.shape)}")
        check_ids("idx", idx, self.config.vocab_size)
        start = 0 if cache is None else len(cache)
        T = idx.shape[1]
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} positions exceed block_size={self.config.block_size} "
                             "(the position table's length); crop the context")
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for layer, block in enumerate(self.transformer.h):
            x = block(x, cache, layer)  # (B, T, d)
        logits: torch.Tensor = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        return logits

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The decoding interface: prefixes ``(B, t)`` -> next-token logits ``(B, V)``.

        Recomputes the whole prefix (no cache); a prefix longer than ``block_size`` is cropped
        to its last ``block_size`` tokens, as GPT-2's sampler does.
        """
        self._check_prefixes(tokens)
        logits: torch.Tensor = self(tokens[:, -self.config.block_size:])  # (B, t, V)
        return logits[:, -1]

    def _check_prefixes(self, tokens: torch.Tensor) -> None:
        check_ids("tokens", tokens, self.config.vocab_size, ndim=2, shape="(batch, length)")
        if tokens.shape[1] == 0:
            raise ValueError(f"tokens must hold at least one token per row (a prefix to "
                             f"continue), got shape {tuple(tokens.shape)}")

    def cached_step(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """A step with a key-value cache: equal to :meth:`step`, but runs only the new token.

        The returned callable remembers the prefixes it was last called with. When it is called
        with those prefixes extended by one token each, it runs the new tokens only; when the rows
        were reordered or dropped (beam search), it reorders the cache first; otherwise, and once
        the context exceeds ``block_size``, it recomputes from scratch.
        """
        state: dict[str, object] = {"cache": None, "tokens": None}

        @torch.no_grad()
        def step(tokens: torch.Tensor) -> torch.Tensor:
            self._check_prefixes(tokens)
            cache, seen = state["cache"], state["tokens"]
            if tokens.shape[1] > self.config.block_size:
                state["cache"] = state["tokens"] = None
                return self.step(tokens)
            rows = _matching_rows(seen, tokens) if isinstance(seen, torch.Tensor) else None
            if isinstance(cache, KVCache) and rows is not None:
                if not torch.equal(rows, torch.arange(len(rows), device=rows.device)):
                    cache.select(rows)
                logits: torch.Tensor = self(tokens[:, -1:], cache)
            else:
                cache = KVCache(self.config.n_layer)
                logits = self(tokens, cache)
            state["cache"], state["tokens"] = cache, tokens
            return logits[:, -1]  # (B, V)

        return step


def _matching_rows(seen: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor | None:
    """For each row of ``tokens[:, :-1]``, the row of ``seen`` equal to it (or None if any lacks
    one)."""
    if seen.shape[1] != tokens.shape[1] - 1:
        return None
    index = {tuple(row): i for i, row in enumerate(seen.tolist())}
    try:
        return torch.tensor([index[tuple(row)] for row in tokens[:, :-1].tolist()],
                            device=tokens.device)
    except KeyError:
        return None


def generation_cost(n_layer: int, n_embd: int, prompt_len: int,
                    new_tokens: int) -> tuple[int, int, int]:
    r"""What generating ``new_tokens`` after a prompt costs, without and with a key-value cache.

    Token :math:`i` of :math:`n` new ones (:math:`i = 1..n`) is predicted from the prefix of
    :math:`P + i - 1` tokens. Without a cache every step runs its whole prefix through each layer;
    with one, the first step runs the prompt (the *prefill*) and every later step only the token
    appended last (*decode*). The last new token is never run: nothing is predicted from it.

    .. math:: \sum_{i=1}^{n} (P + i - 1) = nP + \tfrac{n(n-1)}{2} \quad\text{against}\quad
              P + n - 1 \text{ positions per layer},

    and at the end each of the :math:`L` layers caches a key and a value of :math:`d` numbers for
    each of those :math:`P + n - 1` positions: :math:`2 L d (P + n - 1)` numbers per sequence.

    Args:
        n_layer: :math:`L`; n_embd: :math:`d`; prompt_len: :math:`P \ge 1`;
        new_tokens: :math:`n \ge 1`.

    Returns:
        ``(positions per layer without the cache, positions per layer with it, numbers cached)``.

    Example:
        >>> generation_cost(n_layer=2, n_embd=8, prompt_len=3, new_tokens=4)  # 3+4+5+6; 3+1+1+1
        (18, 6, 192)
    """
    for name, value in (("n_layer", n_layer), ("n_embd", n_embd), ("prompt_len", prompt_len),
                        ("new_tokens", new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    run = prompt_len + new_tokens - 1  # positions that ever pass through a layer
    without = new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2
    return without, run, 2 * n_layer * n_embd * run


def gpt_params(config: GPTConfig) -> dict[str, int]:
    r"""Parameters of :class:`GPT` by formula, part by part, and their ``"total"``.

    Per block, with :math:`d` = ``n_embd`` and biases: attention :math:`3d^2 + 3d` (c_attn) +
    :math:`d^2 + d` (c_proj), MLP :math:`4d^2 + 4d` + :math:`4d^2 + d`, two LayerNorms :math:`4d`:

    .. math:: 12 d^2 + 13 d \text{ per block}, \qquad
              N = V d + T_{\max} d + L (12 d^2 + 13 d) + 2 d

    (tied output layer: no extra :math:`V d`). Without biases a block has :math:`12 d^2 + 2 d`
    and the final LayerNorm :math:`d`.

    Example:
        >>> gpt_params(GPTConfig())["total"]  # GPT-2 small
        124439808
    """
    d, L, b = config.n_embd, config.n_layer, int(config.bias)
    per_block = 12 * d * d + 2 * d + b * (3 * d + d + 4 * d + d + 2 * d)
    parts = {
        "token_embedding": config.vocab_size * d,
        "position_embedding": config.block_size * d,
        "blocks": L * per_block,
        "final_norm": d + b * d,
        "lm_head": 0,  # tied to the token embedding
    }
    parts["total"] = sum(parts.values())
    return parts


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""Mean next-token cross-entropy in nats per token, :math:`-\frac1{BT}\sum \log p(y_{b,t})`.

    Args:
        logits: ``(B, T, V)``, position ``t`` predicting ``targets[:, t]``.
        targets: ``(B, T)`` ids (e.g. ``y`` of :func:`course_lib.corpus.random_windows`).

    Example:
        >>> abs(lm_loss(torch.zeros(1, 2, 4), torch.tensor([[0, 3]])).item() - math.log(4)) < 1e-6
        True
    """
    check_float_tensor("logits", logits, ndim=3, shape="(B, T, V)")
    check_ids("targets", targets, logits.shape[-1], ignore_index=-100, dtypes=TARGET_DTYPES)
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)} do not match targets (B, T) "
                         f"= {tuple(targets.shape)}")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def bits_per_byte(nats_per_token: float, n_tokens: int, n_bytes: int) -> float:
    r"""Convert a loss in nats per token to bits per byte of text.

    .. math:: \text{bpb} = \frac{\mathcal L_{\text{token}}\; N_{\text{tokens}}}{N_{\text{bytes}}
              \ln 2}

    The total information is the same whatever the tokenizer; per token it is not (a BPE token
    holds several bytes), so only bits per byte compares models with different tokenizers.

    Example:
        >>> bits_per_byte(math.log(2), n_tokens=10, n_bytes=10)  # 1 bit per 1-byte token
        1.0
    """
    if n_bytes <= 0 or n_tokens < 0:
        raise ValueError(f"need n_bytes > 0 and n_tokens >= 0, got {n_bytes}, {n_tokens}")
    return nats_per_token * n_tokens / (n_bytes * math.log(2))


def bits_per_byte_loss(logits: torch.Tensor, targets: torch.Tensor,
                       token_bytes: torch.Tensor) -> torch.Tensor:
    r"""The loss of a batch in bits per byte of the text its targets stand for.

    Each target token :math:`y` stands for :math:`n(y)` bytes of text (``token_bytes[y]``), so

    .. math:: \text{bpb} = \frac{\sum_{b,t} -\ln p(y_{b,t})}{\ln 2 \,\sum_{b,t} n(y_{b,t})}:

    the whole batch's information in bits, divided by the bytes it covers (a ratio of sums, not
    a mean of per-token ratios). For a byte-level vocabulary (every :math:`n(y) = 1`) it is the
    loss in nats per token divided by :math:`\ln 2`.

    Args:
        logits: ``(B, T, V)``, position ``t`` predicting ``targets[:, t]``.
        targets: ``(B, T)`` ids.
        token_bytes: ``(V,)`` integers, the length in bytes of each token (e.g.
            :func:`course_lib.bpe.token_lengths`).

    Returns:
        A 0-d tensor in the logits' dtype.

    Example:
        >>> logits = torch.zeros(1, 2, 4)  # uniform: 2 bits per token
        >>> bits_per_byte_loss(logits, torch.tensor([[0, 3]]), torch.tensor([1, 1, 1, 3])).item()
        1.0
    """
    check_float_tensor("logits", logits, ndim=3, shape="(B, T, V)")
    check_ids("targets", targets, logits.shape[-1], dtypes=(torch.long,))
    check_int_tensor("token_bytes", token_bytes, ndim=1, shape="(V,)")
    if token_bytes.numel() and int(token_bytes.min()) < 0:
        raise ValueError(f"token_bytes must count bytes (>= 0), got {int(token_bytes.min())}")
    if logits.shape[:-1] != targets.shape or token_bytes.shape != logits.shape[-1:]:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)}, targets (B, T) = "
                         f"{tuple(targets.shape)} and token_bytes (V,) = {tuple(token_bytes.shape)}"
                         " do not fit together")
    nats = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
    n_bytes = token_bytes.to(logits.device)[targets].sum()
    return nats / (n_bytes.to(logits.dtype) * math.log(2))


def to_gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's checkpoint layout: the four ``Conv1D`` weights transposed.

    Example:
        >>> model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4))
        >>> to_gpt2_state_dict(model)["transformer.h.0.mlp.c_fc.weight"].shape  # (in, out)
        torch.Size([4, 16])
    """
    return {name: (t.t() if name.endswith(CONV1D_WEIGHTS) else t).detach().clone()
            for name, t in model.state_dict().items()}


def from_gpt2_state_dict(state_dict: dict[str, torch.Tensor], config: GPTConfig) -> GPT:
    """A :class:`GPT` holding the weights of a GPT-2 checkpoint's state dict (HF naming).

    Buffers that are not weights (``attn.bias``, ``attn.masked_bias``: GPT-2's causal mask) are
    ignored; a missing, misshapen or non-float weight is an error. The model takes the
    checkpoint's dtype and device.
    """
    # Values may be None: a missing wte leaves the tied lm_head.weight None (reported below).
    theirs: dict[str, torch.Tensor | None] = {
        k: v for k, v in state_dict.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    wte = theirs.get("transformer.wte.weight")
    theirs.setdefault("lm_head.weight", wte)  # tied
    # built where the checkpoint is, so nothing is copied across devices (GPT's state is weights)
    with torch.device(wte.device if isinstance(wte, torch.Tensor) else torch.get_default_device()):
        model = GPT(config)
    ours = model.state_dict()
    if set(theirs) != set(ours):
        raise ValueError(f"state_dict keys differ from GPT's: missing "
                         f"{sorted(set(ours) - set(theirs))[:4]}, unexpected "
                         f"{sorted(set(theirs) - set(ours))[:4]}")
    checked = {name: check_float_tensor(f"state_dict[{name!r}]", tensor)
               for name, tensor in theirs.items()}
    model = model.to(state_dict["transformer.wte.weight"].dtype)
    ours = model.state_dict()
    with torch.no_grad():
        for name, target in ours.items():
            source = checked[name].t() if name.endswith(CONV1D_WEIGHTS) else checked[name]
            if source.shape != target.shape:
                raise ValueError(f"state_dict[{name!r}]: checkpoint shape "
                                 f"{tuple(checked[name].shape)} does not fit {tuple(target.shape)}")
            target.copy_(source)
    return model
