"""How many parameters a Transformer has, by formula, part by part.

Taught in chapter 3, section 4 ("How many parameters?"); chapter 5 builds on
:func:`gpt_params_approx` (``12 d^2 L``). Every formula is checked against ``sum(p.numel())`` of
a built model (``tests/test_counting.py``). Weights are counted as ``nn.Linear`` stores them: a
map from ``n_in`` to ``n_out`` features has ``n_out n_in`` weights and ``n_out`` biases.
"""

from __future__ import annotations

from torch import nn

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
    d_ff = 4 * d if d_ff is None else d_ff
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
