r"""LoRA, low-rank adaptation (Hu et al., 2021), from scratch: adapters, merging, what they cost.

Taught in chapter 8 (from a base model to an assistant), section 2. A frozen linear map
:math:`W_0 \in \mathbb R^{d_{out} \times d_{in}}` gets a trainable low-rank update

.. math:: y = x W_0^\top + b + \frac{\alpha}{r}\, (x A^\top) B^\top, \qquad
          A \in \mathbb R^{r \times d_{in}},\; B \in \mathbb R^{d_{out} \times r},

with :math:`A` random and :math:`B = 0` at the start, so the adapted model starts as the base
model. Only :math:`r (d_{in} + d_{out})` numbers per layer train, instead of
:math:`d_{in} d_{out}`; the optimiser's state shrinks by the same factor. After training the
update merges into the weight, :math:`W = W_0 + \frac{\alpha}{r} B A`, and the model runs as fast
as before (:func:`merge_lora`, :func:`merge_all`).

Names and initialisation follow the ``peft`` library's LoRA layer (``lora_A`` ``(r, in)``,
Kaiming-uniform; ``lora_B`` ``(out, r)``, zeros; ``scaling = lora_alpha / r``), against which
``tests/test_lora.py`` checks the outputs and the merged weights with copied weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from course_lib.checks import check_finite, check_float_tensor, check_int, check_same_dtype

#: The linear maps of :class:`course_lib.gpt.GPT` that get adapters by default: attention's
#: query-key-value and output maps, and both MLP maps (the attention and MLP weights).
GPT_TARGETS: tuple[str, ...] = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def _check_rank(r: int, alpha: float) -> None:
    check_int("r", r)  # the rank: a number of rows of lora_a, so a whole number
    if r < 1:
        raise ValueError(f"the rank r must be at least 1, got {r}")
    check_finite("alpha", alpha)


def _check(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
           alpha: float, **others: torch.Tensor) -> None:
    tensors = {"weight": weight, "lora_a": lora_a, "lora_b": lora_b} | others
    for name, t in tensors.items():
        check_float_tensor(name, t)
    check_same_dtype(**tensors)
    check_finite("alpha", alpha)
    if weight.dim() != 2 or lora_a.dim() != 2 or lora_b.dim() != 2:
        raise ValueError(f"weight, lora_a and lora_b must be matrices, got shapes "
                         f"{tuple(weight.shape)}, {tuple(lora_a.shape)}, {tuple(lora_b.shape)}")
    out_features, in_features = weight.shape
    r = lora_a.shape[0]
    if lora_a.shape != (r, in_features) or lora_b.shape != (out_features, r):
        raise ValueError(f"weight (out, in) = {tuple(weight.shape)} needs lora_a (r, in) and "
                         f"lora_b (out, r); got lora_a {tuple(lora_a.shape)} and lora_b "
                         f"{tuple(lora_b.shape)}")


def lora_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""A linear layer with a LoRA adapter: :math:`x W^\top + b + (\alpha/r) (x A^\top) B^\top`.

    Args:
        x: ``(..., in)``.
        weight: ``(out, in)``, the frozen weight, applied as ``x @ weight.T``.
        bias: ``(out,)`` or None.
        lora_a: ``(r, in)``; lora_b: ``(out, r)``; ``r`` is the rank.
        alpha: the scale numerator: the update is multiplied by ``alpha / r``.

    Returns:
        ``(..., out)``. The low-rank path never forms the ``(out, in)`` matrix ``B A``.

    Example:
        >>> w, a, b = torch.eye(2), torch.ones(1, 2), torch.ones(2, 1)
        >>> lora_forward(torch.tensor([[1.0, 2.0]]), w, None, a, b, alpha=2.0)
        tensor([[7., 8.]])
    """
    others = {"x": x} if bias is None else {"x": x, "bias": bias}
    _check(weight, lora_a, lora_b, alpha, **others)
    if x.dim() == 0:
        raise ValueError("x must have shape (..., in), got a 0-d tensor")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must have shape (out,) = {tuple(weight.shape[:1])}, got "
                         f"{tuple(bias.shape)}")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features; weight (out, in) = "
                         f"{tuple(weight.shape)} expects {weight.shape[1]}")
    y = x @ weight.T
    if bias is not None:
        y = y + bias
    return y + (alpha / lora_a.shape[0]) * ((x @ lora_a.T) @ lora_b.T)


def merge_lora(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
               alpha: float) -> torch.Tensor:
    r"""The merged weight :math:`W_0 + \frac{\alpha}{r} B A`, ``(out, in)``, applied as ``x @ W.T``.

    Example:
        >>> merge_lora(torch.zeros(2, 3), torch.ones(1, 3), torch.ones(2, 1), alpha=1.0)
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
    """
    _check(weight, lora_a, lora_b, alpha)
    return weight + (alpha / lora_a.shape[0]) * (lora_b @ lora_a)


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``r`` adapter (peft's names and init).

    Example:
        >>> layer = LoRALinear(nn.Linear(4, 3), r=2, alpha=4.0)
        >>> [name for name, p in layer.named_parameters() if p.requires_grad]
        ['lora_A', 'lora_B']
        >>> x = torch.randn(5, 4)
        >>> torch.equal(layer(x), layer.base(x))  # B = 0: the adapter starts as a no-op
        True
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear (weight (out, in), applied as "
                            f"x @ weight.T), got {type(base).__name__}")
        _check_rank(r, alpha)
        self.base = base
        self.r, self.alpha = r, float(alpha)
        for p in base.parameters():
            p.requires_grad_(False)
        factory: dict[str, Any] = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, **factory))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **factory))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # peft's (and nn.Linear's) init

    @property
    def scaling(self) -> float:
        """``alpha / r``."""
        return self.alpha / self.r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lora_forward(x, self.base.weight, self.base.bias, self.lora_A, self.lora_B,
                            self.alpha)

    def merged(self) -> nn.Linear:
        """An ``nn.Linear`` whose weight is :func:`merge_lora` of this layer's (same outputs)."""
        out = nn.Linear(self.base.in_features, self.base.out_features,
                        bias=self.base.bias is not None, device=self.base.weight.device,
                        dtype=self.base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(merge_lora(self.base.weight, self.lora_A, self.lora_B, self.alpha))
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out


def add_lora(model: nn.Module, r: int, alpha: float,
             targets: Iterable[str] = GPT_TARGETS) -> nn.Module:
    """Freeze ``model``; wrap each ``nn.Linear`` named ``*<target>`` in a :class:`LoRALinear`.

    Changes ``model`` in place and returns it; only the adapters train afterwards. ``targets``
    is one name or several; a bad rank or target leaves the model as it was.

    Example:
        >>> from course_lib.gpt import GPT, GPTConfig
        >>> model = add_lora(GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=2, n_head=2,
        ...                                n_embd=8)), r=2, alpha=2.0)
        >>> trainable_parameters(model)  # 2 layers x (2 (8+24) + 2 (8+8) + 2 (8+32) + 2 (32+8))
        512
    """
    _check_rank(r, alpha)
    targets = (targets,) if isinstance(targets, str) else tuple(targets)  # one name, not letters
    if not all(isinstance(t, str) for t in targets):
        raise TypeError(f"targets must be module names (str), got {targets!r}")
    found = [(name, module) for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and name.endswith(targets)]
    if not found:
        raise ValueError(f"no nn.Linear of the model has a name ending with one of targets "
                         f"{targets}")
    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in found:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(module, r, alpha))
    return model


def merge_all(model: nn.Module) -> nn.Module:
    """Replace every :class:`LoRALinear` of ``model`` by its merged ``nn.Linear`` (in place)."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name, module in found:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, module.merged())
    return model


def trainable_parameters(model: nn.Module) -> int:
    """The number of parameters that train (``requires_grad``), each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adam_state_bytes(model: nn.Module) -> int:
    """Bytes of Adam's two moments for the trainable parameters: ``2 x`` their size in bytes.

    Adam keeps a first and a second moment per trainable number, in the parameter's dtype
    (float32 here: 8 bytes per trainable parameter). Frozen parameters need none.

    Example:
        >>> adam_state_bytes(nn.Linear(3, 2))  # 8 parameters x 2 moments x 4 bytes
        64
    """
    return sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes actually held in ``optimizer.state`` (tensors only; after at least one step)."""
    return sum(t.numel() * t.element_size() for state in optimizer.state.values()
               for t in state.values() if isinstance(t, torch.Tensor) and t.dim() > 0)


def gpt_lora_parameters(n_layer: int, n_embd: int, r: int, n_head: int | None = None,
                        n_kv_head: int | None = None) -> int:
    r"""The trainable numbers of LoRA at rank ``r`` on every map of :data:`GPT_TARGETS`.

    Counted from the shapes of a course GPT's block (:class:`course_lib.gpt.Block`): what
    :func:`add_lora` then leaves trainable (:func:`trainable_parameters`). With ``n_kv_head``
    key/value heads for ``n_head`` query heads (grouped-query attention, chapter 7; ``n_head``
    must divide ``n_embd`` and ``n_kv_head`` divide ``n_head``), the fused ``c_attn`` computes the
    queries and the fewer keys and values at once; left out, every head has its own (the course
    GPT).
    """
    check_int("n_layer", n_layer, minimum=1)
    check_int("n_embd", n_embd, minimum=1)
    check_int("r", r, minimum=1)
    d = n_embd
    kv = d  # the width of the keys (and of the values)
    if n_head is not None or n_kv_head is not None:
        if n_head is None or n_kv_head is None:
            raise ValueError("give both n_head and n_kv_head, or neither")
        check_int("n_head", n_head, minimum=1)
        check_int("n_kv_head", n_kv_head, minimum=1)
        if d % n_head or n_head % n_kv_head:
            raise ValueError(f"n_head ({n_head}) must divide n_embd ({d}) and n_kv_head "
                             f"({n_kv_head}) divide n_head")
        kv = n_kv_head * (d // n_head)
    shapes = [(d + 2 * kv, d), (d, d), (4 * d, d), (d, 4 * d)]  # (out, in) of GPT_TARGETS
    return n_layer * sum(r * (d_in + d_out) for d_out, d_in in shapes)
