r"""Which heads matter: head importance from the gradient of a head mask, and pruning by it.

Taught in chapter 6, section 7. Michel, Levy and Neubig (2019), "Are Sixteen Heads Really Better
than One?", multiply the output of each head :math:`h` by a gate :math:`\xi_h` (all ones: the
model is unchanged) and score the head by how much the loss moves when the gate does:

.. math:: I_h = \mathbb{E}_{x}\left|\frac{\partial \mathcal L(x)}{\partial \xi_h}\right|

(a first-order estimate of the loss change when the head is removed, :math:`\xi_h = 0`), then
prune the least important heads first. Voita et al. (2019), "Analyzing Multi-Head
Self-Attention", found in the same way that a few specialised heads do most of the work and most
can be pruned at little cost.

No model code needs to change: a head's output occupies features ``h*d_head:(h+1)*d_head`` of the
input of the output projection (``out_proj`` of :class:`course_lib.multihead.MultiHeadAttention`,
``c_proj`` of :class:`course_lib.gpt.CausalSelfAttention`), so a forward pre-hook on that
projection scales each head's slice by its gate (:func:`head_gates`, :func:`head_mask`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from course_lib.checks import check_bool_tensor, check_finite_tensor, check_int, check_tensor
from course_lib.gpt import CausalSelfAttention
from course_lib.multihead import MultiHeadAttention


def attention_layers(model: nn.Module) -> list[tuple[nn.Module, nn.Linear, int]]:
    """The attention modules of ``model`` in order: ``(module, output projection, n_heads)``.

    Finds :class:`course_lib.multihead.MultiHeadAttention` (``out_proj``) and
    :class:`course_lib.gpt.CausalSelfAttention` (``c_proj``) anywhere in ``model``.

    Example:
        >>> from course_lib.gpt import GPT, GPTConfig
        >>> model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=3, n_head=2, n_embd=8))
        >>> [h for _, _, h in attention_layers(model)]
        [2, 2, 2]
    """
    found: list[tuple[nn.Module, nn.Linear, int]] = []
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            found.append((module, module.out_proj, module.n_heads))
        elif isinstance(module, CausalSelfAttention):
            found.append((module, module.c_proj, module.n_head))
    return found


def _gate_hook(gate: torch.Tensor, n_heads: int,
               ) -> Callable[[nn.Module, tuple[Any, ...]], tuple[Any, ...]]:
    def hook(module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        x = inputs[0]                                                # (B, T, h * d_head)
        B, T, d = x.shape
        heads = x.reshape(B, T, n_heads, d // n_heads) * gate.to(x.dtype)[:, None]
        return (heads.reshape(B, T, d), *inputs[1:])

    return hook


@contextmanager
def head_gates(model: nn.Module, gates: torch.Tensor | None = None,
               ) -> Iterator[torch.Tensor]:
    """Scale every head's output by a gate while the context is open; yield the ``(L, H)`` gates.

    By default the gates are ones with ``requires_grad=True`` (the model computes exactly what it
    did, and ``autograd.grad(loss, gates)`` gives :math:`\\partial L / \\partial \\xi`). Pass
    ``gates`` to fix them (e.g. a 0/1 mask). The hooks are removed on exit.

    Example:
        >>> mha = MultiHeadAttention(8, 2)
        >>> x = torch.randn(1, 3, 8)
        >>> with head_gates(mha) as gates:  # ones: the same output, now differentiable in gates
        ...     out, _ = mha(x, x, x)
        >>> torch.allclose(out, mha(x, x, x)[0]), gates.shape
        (True, torch.Size([1, 2]))
    """
    layers = attention_layers(model)
    if not layers:
        raise ValueError("no course_lib attention module (MultiHeadAttention or "
                         "CausalSelfAttention) found in the model")
    n_heads = layers[0][2]
    if any(h != n_heads for _, _, h in layers):
        raise ValueError(f"head_gates needs the same number of heads in every layer, got "
                         f"{[h for _, _, h in layers]}")
    param = next(model.parameters())
    if gates is not None:
        check_tensor("gates", gates)
    if gates is None:
        gates = torch.ones(len(layers), n_heads, dtype=param.dtype, device=param.device,
                           requires_grad=True)
    if gates.shape != (len(layers), n_heads):
        raise ValueError(f"gates must be (layers, heads) = ({len(layers)}, {n_heads}), got "
                         f"{tuple(gates.shape)}")
    handles = [proj.register_forward_pre_hook(_gate_hook(gates[i], h))
               for i, (_, proj, h) in enumerate(layers)]
    try:
        yield gates
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def head_mask(model: nn.Module, keep: torch.Tensor) -> Iterator[None]:
    """Run ``model`` with only the heads where ``keep`` ``(L, H)`` is True (pruned heads give 0).

    Example:
        >>> mha = MultiHeadAttention(8, 2); x = torch.randn(1, 3, 8)
        >>> with head_mask(mha, torch.tensor([[False, False]])):
        ...     out, _ = mha(x, x, x)
        >>> torch.allclose(out, mha.out_proj.bias.expand(1, 3, 8))  # only the bias is left
        True
    """
    check_bool_tensor("keep", keep, ndim=2, shape="(layers, heads)")
    param = next(model.parameters())
    with head_gates(model, keep.to(device=param.device, dtype=param.dtype)):
        yield


def head_importance(model: nn.Module, batches: Iterable[object],
                    loss_fn: Callable[[nn.Module, object], torch.Tensor],
                    normalize: bool = True) -> torch.Tensor:
    r"""Michel et al.'s importance :math:`I_h = \mathbb E_x |\partial \mathcal L / \partial \xi_h|`.

    Args:
        model: a model holding course_lib attention modules (same head count in each layer).
        batches: the data to average over (anything ``loss_fn`` accepts).
        loss_fn: ``loss_fn(model, batch)`` -> a scalar loss.
        normalize: divide each layer's scores by their L2 norm (Michel et al., section 4.2), so
            layers compare on one scale when heads are ranked globally.

    Returns:
        ``(L, H)`` importances, non-negative. The model's parameter gradients are not touched.

    Example:
        >>> from course_lib.gpt import GPT, GPTConfig, lm_loss
        >>> model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, n_embd=8))
        >>> x = torch.randint(7, (4, 8))
        >>> head_importance(model, [x], lambda m, b: lm_loss(m(b[:, :-1]), b[:, 1:])).shape
        torch.Size([2, 2])
    """
    total: torch.Tensor | None = None
    count = 0
    for batch in batches:
        with head_gates(model) as gates:
            loss = loss_fn(model, batch)
            if loss.dim() != 0:
                raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
            (grad,) = torch.autograd.grad(loss, gates)
        total = grad.abs() if total is None else total + grad.abs()
        count += 1
    if total is None:
        raise ValueError("batches is empty: no data to estimate head importance on")
    scores = total / count
    if normalize:
        norm = scores.norm(dim=1, keepdim=True)
        scores = scores / torch.where(norm > 0, norm, torch.ones_like(norm))
    return scores


def _check_importance(importance: torch.Tensor) -> torch.Tensor:
    check_tensor("importance", importance, ndim=2, shape="(layers, heads)")
    return check_finite_tensor("importance", importance)  # NaN would sort anywhere


def prune_order(importance: torch.Tensor) -> list[tuple[int, int]]:
    """Heads ``(layer, head)`` from least to most important (ties: lower layer, head first).

    Example:
        >>> prune_order(torch.tensor([[0.5, 0.1], [0.9, 0.3]]))
        [(0, 1), (1, 1), (0, 0), (1, 0)]
    """
    H = _check_importance(importance).shape[1]
    order = torch.sort(importance.flatten(), stable=True).indices.tolist()
    return [(i // H, i % H) for i in order]


def keep_mask(importance: torch.Tensor, n_keep: int) -> torch.Tensor:
    """``(L, H)`` boolean: the ``n_keep`` most important heads, ranked over all layers.

    Example:
        >>> keep_mask(torch.tensor([[0.5, 0.1], [0.9, 0.3]]), 2).tolist()
        [[True, False], [True, False]]
    """
    L, H = _check_importance(importance).shape
    if not 0 <= check_int("n_keep", n_keep) <= L * H:
        raise ValueError(f"n_keep must be between 0 and {L * H} heads, got {n_keep}")
    keep = torch.ones(L, H, dtype=torch.bool, device=importance.device)
    for layer, head in prune_order(importance)[:L * H - n_keep]:
        keep[layer, head] = False
    return keep


def pruning_curve(model: nn.Module, importance: torch.Tensor,
                  evaluate: Callable[[nn.Module], float],
                  n_keep: Iterable[int] | None = None) -> list[tuple[int, float]]:
    """Evaluate ``model`` keeping the ``n`` most important heads, for each ``n`` in ``n_keep``.

    Args:
        model: the model (unchanged afterwards).
        importance: ``(L, H)``, e.g. from :func:`head_importance`.
        evaluate: ``evaluate(model)`` -> a number (loss or accuracy), run under the head mask.
        n_keep: head counts (default: all, all - 1, ..., 0).

    Returns:
        ``[(n, evaluate(model with n heads)), ...]``.

    Example:
        >>> mha = MultiHeadAttention(8, 2); x = torch.randn(1, 3, 8)
        >>> curve = pruning_curve(mha, torch.tensor([[1.0, 2.0]]),
        ...                       lambda m: m(x, x, x)[0].norm().item())
        >>> [n for n, _ in curve]
        [2, 1, 0]
    """
    L, H = _check_importance(importance).shape
    layers = attention_layers(model)
    if layers and (L, H) != (len(layers), layers[0][2]):
        raise ValueError(f"importance must be (layers, heads) = ({len(layers)}, {layers[0][2]}) "
                         f"for this model, got {(L, H)}")
    counts = list(range(L * H, -1, -1)) if n_keep is None else list(n_keep)
    curve = []
    for n in counts:
        with head_mask(model, keep_mask(importance, n)):
            curve.append((n, float(evaluate(model))))
    return curve
