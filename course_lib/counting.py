"""How many parameters a Transformer has, by formula, part by part.

Taught in chapter 3, section 4 ("How many parameters?"); chapter 5 builds on
:func:`gpt_params_approx` (``12 d^2 L``). Every formula is checked against ``sum(p.numel())`` of
a built model (``tests/test_counting.py``). Weights are counted as ``nn.Linear`` stores them: a
map from ``n_in`` to ``n_out`` features has ``n_out n_in`` weights and ``n_out`` biases.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from course_lib.checks import check_int
from course_lib.transformer import TransformerConfig


def attention_params(d: int) -> int:
    """``4 d^2 + 4 d``: the query, key, value and output projections with biases.

    The number of heads does not appear: the heads split each ``d x d`` projection into slices.

    Example:
        >>> attention_params(8)
        288
    """
    return 4 * d * d + 4 * d


def feed_forward_params(d: int, d_ff: int) -> int:
    """``2 d d_ff + d_ff + d``: two linear maps with biases.

    Example:
        >>> feed_forward_params(8, 32)
        552
    """
    return 2 * d * d_ff + d_ff + d


def encoder_layer_params(d: int, d_ff: int) -> int:
    """``(4 d^2 + 4 d) + (2 d d_ff + d_ff + d) + 4 d``: attention, FFN, two LayerNorms.

    A GPT block (decoder-only: no cross-attention) has the same parameters.

    Example:
        >>> encoder_layer_params(8, 32)
        872
    """
    return attention_params(d) + feed_forward_params(d, d_ff) + 2 * (2 * d)


def decoder_layer_params(d: int, d_ff: int) -> int:
    """``2 (4 d^2 + 4 d) + (2 d d_ff + d_ff + d) + 6 d``: two attentions, FFN, three LayerNorms.

    Example:
        >>> decoder_layer_params(8, 32)
        1176
    """
    return 2 * attention_params(d) + feed_forward_params(d, d_ff) + 3 * (2 * d)


def layer_shares(d: int, d_ff: int | None = None) -> dict[str, float]:
    """Where a GPT-style layer's parameters are: the fraction in attention, FFN and LayerNorms.

    With ``d_ff = 4 d`` (the default) and biases and norms neglected, attention holds ``4 d^2``
    and the FFN ``8 d^2`` of ``12 d^2``: the FFN has about two thirds.

    Example:
        >>> round(layer_shares(768)["ffn"], 4)
        0.6663
    """
    check_int("d", d, minimum=1)  # d = 0 would share out nothing (a division by zero)
    d_ff = 4 * d if d_ff is None else check_int("d_ff", d_ff, minimum=1)
    total = encoder_layer_params(d, d_ff)
    return {"attention": attention_params(d) / total,
            "ffn": feed_forward_params(d, d_ff) / total,
            "norms": 4 * d / total}


def gpt_params_approx(d: int, n_layers: int) -> int:
    """``12 d^2 L``: a GPT-style stack with ``d_ff = 4 d``, biases, norms and embeddings left out.

    Each layer has ``4 d^2`` in attention and ``2 d (4 d) = 8 d^2`` in the feed-forward network.

    Example:
        >>> gpt_params_approx(768, 12) / 1e6  # GPT-2 small's layers, about 85M
        84.934656
    """
    return 12 * d * d * n_layers


def transformer_params(config: TransformerConfig) -> dict[str, int]:
    """The parameters of :class:`~course_lib.transformer.Transformer` by formula, with ``"total"``.

    Embeddings: ``V d`` each (shared once when tied); the sinusoidal positions are a buffer, not
    parameters. Output layer: ``d V + V``. Final LayerNorms (pre-norm only): ``2 d`` each.

    Example:
        >>> from course_lib.transformer import Transformer
        >>> c = TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, d_model=8, d_ff=16)
        >>> transformer_params(c)["total"] == count_parameters(Transformer(c))
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
    """``sum(p.numel())`` over the distinct parameters (tied weights count once).

    Example:
        >>> count_parameters(nn.Linear(3, 2))
        8
    """
    return sum(p.numel() for p in module.parameters())


# --------------------------------------------------------------------------------------------
# GPT-style language models, with every convention an argument (chapter 5, section 1)
# --------------------------------------------------------------------------------------------


def gpt_param_parts(d_model: int, n_layers: int, vocab_size: int, n_ctx: int, *,
                    tied: bool = True, biases: bool = True, d_ff: int | None = None,
                    learned_positions: bool = True) -> dict[str, int]:
    r"""A GPT-2-style decoder's parameters, part by part, with ``"total"`` and ``"non_embedding"``.

    Taught in chapter 5, section 1. The architecture is :class:`course_lib.gpt.GPT`'s (GPT-2's):
    pre-norm blocks of attention (``4 d^2`` weights) and a two-layer MLP (``2 d d_ff``), two
    LayerNorms per block and a final one, token embeddings ``V d``, learned positions
    ``n_ctx d``, and an output layer that is the token embedding when ``tied``. With ``biases``,
    every Linear has a bias and every LayerNorm a shift (GPT-2); without, neither (the LayerNorms
    keep their gains). With ``d_ff = 4 d`` and biases a block holds

    .. math:: 12 d^2 + 13 d, \qquad N = L(12 d^2 + 13 d) + 2d + Vd + n_{ctx} d
              \;(+\,Vd \text{ untied}).

    ``non_embedding`` is Kaplan et al. (2020)'s :math:`N`: everything but the token and position
    tables (and an untied output layer, which is the same size as the token table).

    Example:
        >>> gpt_param_parts(768, 12, 50257, 1024)["total"]  # GPT-2 small
        124439808
    """
    for name, value in (("d_model", d_model), ("n_layers", n_layers), ("vocab_size", vocab_size),
                        ("n_ctx", n_ctx)):
        if value < 0 or (name in ("d_model", "vocab_size") and value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value}")
    d, b = d_model, int(biases)
    d_ff = 4 * d if d_ff is None else d_ff
    attention = 4 * d * d + b * 4 * d
    mlp = 2 * d * d_ff + b * (d_ff + d)
    norms = 2 * (d + b * d)
    parts = {
        "token_embedding": vocab_size * d,
        "position_embedding": n_ctx * d if learned_positions else 0,
        "attention": n_layers * attention,
        "mlp": n_layers * mlp,
        "norms": n_layers * norms + (d + b * d),
        "lm_head": 0 if tied else vocab_size * d,
    }
    parts["total"] = sum(parts.values())
    parts["non_embedding"] = parts["attention"] + parts["mlp"] + parts["norms"]
    return parts


def gpt_param_count(d_model: int, n_layers: int, vocab_size: int, n_ctx: int, *,
                    tied: bool = True, biases: bool = True, d_ff: int | None = None) -> int:
    """The total of :func:`gpt_param_parts` (every parameter, tied weights once).

    Example:
        >>> gpt_param_count(1600, 48, 50257, 1024)  # GPT-2 XL
        1557611200
    """
    return gpt_param_parts(d_model, n_layers, vocab_size, n_ctx, tied=tied, biases=biases,
                           d_ff=d_ff)["total"]


#: GPT-2's four released checkpoints (Radford et al., 2019; Hugging Face's configurations):
#: name -> (n_layer, n_embd, n_head), with vocab 50,257 and context 1,024.
GPT2_SHAPES: dict[str, tuple[int, int, int]] = {
    "gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16), "gpt2-large": (36, 1280, 20),
    "gpt2-xl": (48, 1600, 25)}
#: Their parameter counts as published by the checkpoints (``sum(p.numel())`` of the released
#: weights, tied output layer counted once).
GPT2_PUBLISHED: dict[str, int] = {"gpt2": 124_439_808, "gpt2-medium": 354_823_168,
                                  "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200}
GPT2_VOCAB, GPT2_CTX = 50257, 1024


@dataclass(frozen=True)
class GPT3Row:
    """One row of GPT-3's Table 2.1 (Brown et al., 2020), as printed."""

    name: str
    n_params: float  # the table's "n_params", rounded as printed
    n_layers: int
    d_model: int
    n_heads: int
    d_head: int


#: GPT-3's Table 2.1 as printed (vocabulary 50,257, context 2,048 for every model).
GPT3_TABLE: tuple[GPT3Row, ...] = (
    GPT3Row("GPT-3 Small", 125e6, 12, 768, 12, 64),
    GPT3Row("GPT-3 Medium", 350e6, 24, 1024, 16, 64),
    GPT3Row("GPT-3 Large", 760e6, 24, 1536, 16, 96),
    GPT3Row("GPT-3 XL", 1.3e9, 24, 2048, 24, 128),  # 24 x 128 = 3072, not 2048
    GPT3Row("GPT-3 2.7B", 2.7e9, 32, 2560, 32, 80),
    GPT3Row("GPT-3 6.7B", 6.7e9, 32, 4096, 32, 128),
    GPT3Row("GPT-3 13B", 13.0e9, 40, 5140, 40, 128),  # 40 x 128 = 5120: 5140 looks like a typo
    GPT3Row("GPT-3 175B", 175.0e9, 96, 12288, 96, 128),
)
GPT3_VOCAB, GPT3_CTX = 50257, 2048


def gpt3_inconsistencies() -> list[str]:
    """The rows of :data:`GPT3_TABLE` whose ``n_heads x d_head`` is not ``d_model``.

    Example:
        >>> gpt3_inconsistencies()
        ['GPT-3 XL', 'GPT-3 13B']
    """
    return [r.name for r in GPT3_TABLE if r.n_heads * r.d_head != r.d_model]


# --------------------------------------------------------------------------------------------
# The memory of training state on several GPUs (chapter 5, section 8)
# --------------------------------------------------------------------------------------------

#: Bytes per parameter of mixed-precision Adam training, by kind of state (Rajbhandari et al.,
#: 2020, section 3.1).
STATE_BYTES: dict[str, int] = {"weights": 2, "gradients": 2, "optimizer": 12}
#: What each scheme splits across the GPUs (the rest every GPU holds whole). ZeRO's stages 1, 2
#: and 3 are Rajbhandari et al.'s P_os, P_os+g and P_os+g+p; "tensor" is Megatron-style tensor
#: parallelism with every parameter in a split matrix (Shoeybi et al., 2019).
SHARDED: dict[str, tuple[str, ...]] = {
    "ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "gradients"),
    "zero3": ("optimizer", "gradients", "weights"),
    "tensor": ("optimizer", "gradients", "weights")}


def training_state_bytes(n_params: int, n_gpus: int, scheme: str, n_replicated: int = 0) -> int:
    r"""Bytes of training state (weights, gradients, Adam) that one GPU holds, mixed precision.

    Taught in chapter 5, section 8. A state that is split is cut into ``n_gpus`` equal shards
    of ``ceil(n_params / n_gpus)`` parameters (a flat buffer padded to a multiple of ``n_gpus``,
    as ZeRO and FSDP do); the others are held whole on every GPU. ZeRO splits flat buffers of
    every parameter. Tensor parallelism splits the weight matrices; the ``n_replicated``
    parameters outside them (LayerNorms, the biases added after a row-parallel product) every
    GPU holds whole. Activations, buffers and fragmentation are not counted.

    Example:
        >>> zero1 = training_state_bytes(7_500_000_000, 64, "zero1")
        >>> training_state_bytes(7_500_000_000, 64, "zero3") < zero1 < training_state_bytes(
        ...     7_500_000_000, 64, "ddp")
        True
    """
    if scheme not in SHARDED:
        raise ValueError(f"scheme must be one of {sorted(SHARDED)}, got {scheme!r}")
    if n_params < 0 or n_gpus < 1:
        raise ValueError(f"need n_params >= 0 and n_gpus >= 1, got {n_params}, {n_gpus}")
    if not 0 <= n_replicated <= n_params:
        raise ValueError(f"need 0 <= n_replicated <= n_params, got {n_replicated}")
    if scheme == "tensor":
        return sum(STATE_BYTES.values()) * (-(-(n_params - n_replicated) // n_gpus)
                                             + n_replicated)
    shard = -(-n_params // n_gpus)  # ceil(n_params / n_gpus)
    return sum(size * (shard if state in SHARDED[scheme] else n_params)
               for state, size in STATE_BYTES.items())
