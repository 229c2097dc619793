"""Moving weights between ``torch.nn``'s Transformer modules and course_lib's (the peer checks).

Taught in chapter 3, section 3, where course_lib's layers and the exercises' layers are checked
against ``torch.nn.TransformerEncoderLayer`` and ``torch.nn.TransformerDecoderLayer`` with the
same weights. Two directions:

* ``copy_from_torch_*`` copy a torch module's weights into course_lib's module;
* :func:`encoder_layer_weights` and :func:`decoder_layer_weights` read a torch layer's weights
  into the dict of tensors that chapter 3's layer exercises take, and :func:`randomize_` gives a
  torch module random, non-symmetric weights first (torch starts biases at 0 and LayerNorms at
  ``gamma = 1, beta = 0``, which would hide swapped or missing terms).

All weights keep ``nn.Linear``'s layout, ``y = x W^T + b`` with ``W`` shaped ``(out, in)``.
``nn.MultiheadAttention`` stores the query, key and value projections as the three row blocks of
``in_proj_weight`` ``(3 d, d)``, in that order.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from course_lib.multihead import MultiHeadAttention
from course_lib.transformer import DecoderLayer, EncoderLayer, Transformer


def _copy_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    w_q, w_k, w_v = theirs.in_proj_weight.chunk(3, dim=0)  # (d, d) each
    b_q, b_k, b_v = theirs.in_proj_bias.chunk(3, dim=0)
    for lin, w, b in ((ours.q_proj, w_q, b_q), (ours.k_proj, w_k, b_k), (ours.v_proj, w_v, b_v),
                      (ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)):
        lin.weight.copy_(w)
        lin.bias.copy_(b)


@torch.no_grad()
def copy_from_torch_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    """Copy ``torch.nn.TransformerEncoderLayer`` weights into an :class:`EncoderLayer`.

    Example:
        >>> theirs = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
        >>> ours = EncoderLayer(8, 2, 16).eval()
        >>> copy_from_torch_encoder_layer(ours, theirs)
        >>> x = torch.randn(1, 3, 8)
        >>> torch.allclose(ours(x)[0], theirs(x), atol=1e-5)
        True
    """
    _copy_mha(ours.self_attn, theirs.self_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    ours.norm1.load_state_dict(theirs.norm1.state_dict())
    ours.norm2.load_state_dict(theirs.norm2.state_dict())


@torch.no_grad()
def copy_from_torch_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    """Copy ``torch.nn.TransformerDecoderLayer`` weights (``multihead_attn`` -> ``cross_attn``).

    Example:
        >>> theirs = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
        >>> ours = DecoderLayer(8, 2, 16).eval()
        >>> copy_from_torch_decoder_layer(ours, theirs)
        >>> y, m = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
        >>> torch.allclose(ours(y, m)[0], theirs(y, m), atol=1e-5)
        True
    """
    _copy_mha(ours.self_attn, theirs.self_attn)
    _copy_mha(ours.cross_attn, theirs.multihead_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for name in ("norm1", "norm2", "norm3"):
        getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())


@torch.no_grad()
def copy_from_torch_transformer(ours: Transformer, theirs: nn.Transformer) -> None:
    """Copy the encoder-decoder body of ``torch.nn.Transformer`` (layers and final norms).

    ``torch.nn.Transformer`` ends both stacks with a LayerNorm in either placement, post-norm
    too (where the last layer already ends with one, so torch normalises twice); ours has the
    final norms only when ``norm_first``. To compare a post-norm model, set torch's
    ``encoder.norm`` and ``decoder.norm`` to ``None`` first. Embeddings and the output layer are
    not part of ``torch.nn.Transformer``.
    """
    # ModuleLists are untyped: ours hold EncoderLayers and DecoderLayers, torch's its own.
    for a, b in zip(ours.encoder.layers, theirs.encoder.layers):
        copy_from_torch_encoder_layer(cast(EncoderLayer, a), cast(nn.TransformerEncoderLayer, b))
    for a, b in zip(ours.decoder.layers, theirs.decoder.layers):
        copy_from_torch_decoder_layer(cast(DecoderLayer, a), cast(nn.TransformerDecoderLayer, b))
    for mine, torch_norm in ((ours.encoder.norm, theirs.encoder.norm),
                             (ours.decoder.norm, theirs.decoder.norm)):
        if (mine is None) != (torch_norm is None):
            raise ValueError("final LayerNorms differ: course_lib has them only with norm_first; "
                             "set torch's encoder.norm and decoder.norm to None for post-norm")
        if mine is not None:
            mine.load_state_dict(torch_norm.state_dict())


@torch.no_grad()
def randomize_(module: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    """Overwrite every parameter of ``module`` with ``scale`` times standard normal noise, in place.

    Random biases and LayerNorm parameters, and weights that are neither symmetric nor square,
    make a transposed weight, a swapped norm or a missing bias change the output.

    Example:
        >>> lin = randomize_(nn.Linear(3, 2), seed=0)
        >>> bool(lin.bias.abs().min() > 0)
        True
    """
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype, device=g.device)
                .to(p.device))
    return module


def _attention_weights(mha: nn.MultiheadAttention, w: str, b: str) -> dict[str, torch.Tensor]:
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3, dim=0)  # (d, d) each
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3, dim=0)
    return {f"{w}_q": w_q, f"{w}_k": w_k, f"{w}_v": w_v, f"{w}_o": mha.out_proj.weight.detach(),
            f"{b}_q": b_q, f"{b}_k": b_k, f"{b}_v": b_v, f"{b}_o": mha.out_proj.bias.detach()}


def _ffn_and_norms(layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
                   n_norms: int) -> dict[str, torch.Tensor]:
    out = {"w_1": layer.linear1.weight.detach(), "b_1": layer.linear1.bias.detach(),
           "w_2": layer.linear2.weight.detach(), "b_2": layer.linear2.bias.detach()}
    for i in range(1, n_norms + 1):
        norm = getattr(layer, f"norm{i}")
        out[f"gamma_{i}"] = norm.weight.detach()
        out[f"beta_{i}"] = norm.bias.detach()
    return out


def encoder_layer_weights(layer: nn.TransformerEncoderLayer) -> dict[str, torch.Tensor]:
    """A torch encoder layer's weights as the dict chapter 3's ``encoder_layer`` exercise takes.

    Keys: ``w_q, w_k, w_v, w_o`` ``(d, d)`` and ``b_q, b_k, b_v, b_o`` ``(d,)`` (self-attention),
    ``w_1`` ``(d_ff, d)``, ``b_1``, ``w_2`` ``(d, d_ff)``, ``b_2`` (FFN), ``gamma_1, beta_1``
    (norm of the attention sublayer), ``gamma_2, beta_2`` (norm of the FFN sublayer).

    Example:
        >>> w = encoder_layer_weights(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True))
        >>> w["w_q"].shape, w["w_1"].shape, w["w_2"].shape
        (torch.Size([8, 8]), torch.Size([16, 8]), torch.Size([8, 16]))
    """
    return {**_attention_weights(layer.self_attn, "w", "b"), **_ffn_and_norms(layer, 2)}


def decoder_layer_weights(layer: nn.TransformerDecoderLayer) -> dict[str, torch.Tensor]:
    """A torch decoder layer's weights as the dict chapter 3's ``decoder_layer`` exercise takes.

    The keys of :func:`encoder_layer_weights` for the masked self-attention and the FFN, the
    cross-attention's ``wc_q, wc_k, wc_v, wc_o`` and ``bc_q, bc_k, bc_v, bc_o``, and a third norm:
    ``gamma_1, beta_1`` (self-attention), ``gamma_2, beta_2`` (cross-attention), ``gamma_3,
    beta_3`` (FFN).

    Example:
        >>> w = decoder_layer_weights(nn.TransformerDecoderLayer(8, 2, 16, batch_first=True))
        >>> sorted(k for k in w if k.startswith("wc_"))
        ['wc_k', 'wc_o', 'wc_q', 'wc_v']
    """
    return {**_attention_weights(layer.self_attn, "w", "b"),
            **_attention_weights(layer.multihead_attn, "wc", "bc"), **_ffn_and_norms(layer, 3)}
