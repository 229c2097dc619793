"""Tests of course_lib.head_importance on course_lib's GPT and MultiHeadAttention."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from course_lib.gpt import GPT, GPTConfig, lm_loss
from course_lib.head_importance import (
    attention_layers,
    head_gates,
    head_importance,
    head_mask,
    keep_mask,
    prune_order,
    pruning_curve,
)
from course_lib.multihead import MultiHeadAttention

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _gpt(device: str = "cpu", dtype: torch.dtype = torch.float64) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=12, n_layer=2, n_head=4, n_embd=16)
    return GPT(config).to(device=device, dtype=dtype)


def _batches(device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(11, (3, 12), generator=g).to(device) for _ in range(2)]


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return lm_loss(model(batch[:, :-1]), batch[:, 1:])


class TwoLayerMHA(nn.Module):
    """Two self-attention layers of course_lib.multihead with a residual stream."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MultiHeadAttention(8, 2) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x, x, x)[0]
        return x


# ---- gates ------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_unit_gates_change_nothing_and_hooks_are_removed(device: str) -> None:
    model, (x, _) = _gpt(device), _batches(device)
    before = model(x)
    with head_gates(model) as gates:
        assert gates.shape == (2, 4) and gates.requires_grad
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    assert all(not proj._forward_pre_hooks for _, proj, _ in attention_layers(model))


@pytest.mark.parametrize("device", DEVICES)
def test_mask_equals_zeroed_output_columns(device: str) -> None:
    # Independent peer: removing head h = zeroing its d_head input columns of c_proj.
    model, (x, _) = _gpt(device), _batches(device)
    keep = torch.ones(2, 4, dtype=torch.bool)
    keep[0, 1] = keep[1, 3] = keep[1, 0] = False
    with head_mask(model, keep):
        masked = model(x)
    pruned = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in [(0, 1), (1, 3), (1, 0)]:
            pruned.transformer.h[layer].attn.c_proj.weight[:, 4 * head:4 * head + 4] = 0
    torch.testing.assert_close(masked, pruned(x), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(masked, model(x))


def test_mask_on_multihead_attention_model() -> None:
    torch.manual_seed(2)
    model = TwoLayerMHA().double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    keep = torch.tensor([[True, False], [False, True]])
    with head_mask(model, keep):
        masked = model(x)
    pruned = copy.deepcopy(model)
    with torch.no_grad():
        pruned.layers[0].out_proj.weight[:, 4:] = 0
        pruned.layers[1].out_proj.weight[:, :4] = 0
    torch.testing.assert_close(masked, pruned(x), rtol=1e-12, atol=1e-12)


# ---- importance -----------------------------------------------------------------------------

def test_importance_equals_finite_differences() -> None:
    model, batches = _gpt(), _batches()
    scores = head_importance(model, batches, _loss, normalize=False)
    eps = 1e-6
    expected = torch.zeros(2, 4, dtype=torch.float64)
    with torch.no_grad():
        for layer in range(2):
            for head in range(4):
                for batch in batches:
                    losses = []
                    for sign in (1, -1):
                        gates = torch.ones(2, 4, dtype=torch.float64)
                        gates[layer, head] += sign * eps
                        with head_gates(model, gates):
                            losses.append(_loss(model, batch).item())
                    expected[layer, head] += abs(losses[0] - losses[1]) / (2 * eps) / 2
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-8)


def test_dead_head_has_zero_importance_and_is_pruned_first() -> None:
    model = _gpt()
    with torch.no_grad():
        model.transformer.h[1].attn.c_proj.weight[:, 8:12] = 0    # head 2 of layer 1 is silent
    scores = head_importance(model, _batches(), _loss)
    assert scores[1, 2].item() == 0.0 and (scores.flatten().sort().values[1:] > 0).all()
    assert prune_order(scores)[0] == (1, 2)
    torch.testing.assert_close(scores.norm(dim=1), torch.ones(2, dtype=torch.float64))
    assert all(p.grad is None for p in model.parameters())       # parameters untouched


def test_pruning_curve_ends() -> None:
    model, (x, _) = _gpt(), _batches()
    scores = head_importance(model, [x], _loss)
    curve = pruning_curve(model, scores, lambda m: _loss(m, x).item())
    assert [n for n, _ in curve] == list(range(8, -1, -1))
    assert curve[0][1] == pytest.approx(_loss(model, x).item(), abs=1e-12)
    with head_mask(model, torch.zeros(2, 4, dtype=torch.bool)):
        none = _loss(model, x).item()
    assert curve[-1][1] == pytest.approx(none, abs=1e-12)
    assert model(x).shape == (3, 12, 11)                          # the model is unchanged


def test_keep_mask_and_order_known_answer() -> None:
    scores = torch.tensor([[0.2, 0.9, 0.1], [0.5, 0.3, 0.2]])
    assert prune_order(scores) == [(0, 2), (0, 0), (1, 2), (1, 1), (1, 0), (0, 1)]
    assert keep_mask(scores, 2).tolist() == [[False, True, False], [True, False, False]]
    assert keep_mask(scores, 6).all() and not keep_mask(scores, 0).any()


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    model = _gpt()
    with pytest.raises(ValueError, match="no course_lib attention module"):
        with head_gates(nn.Linear(3, 3)):
            pass
    with pytest.raises(ValueError,
                       match=r"gates must be \(layers, heads\) = \(2, 4\), got \(4, 2\)"):
        with head_gates(model, torch.ones(4, 2)):
            pass
    with pytest.raises(TypeError, match="keep must be a boolean"):
        with head_mask(model, torch.ones(2, 4)):
            pass
    with pytest.raises(ValueError, match="n_keep must be between 0 and 8 heads, got 9"):
        keep_mask(torch.ones(2, 4), 9)
    with pytest.raises(ValueError, match="batches is empty"):
        head_importance(model, [], _loss)
    with pytest.raises(ValueError, match=r"scalar, got shape \(3, 11\)"):
        head_importance(model, _batches()[:1], lambda m, b: m(b)[:, 0])
    mixed = nn.ModuleList([MultiHeadAttention(8, 2), MultiHeadAttention(8, 4)])
    with pytest.raises(ValueError, match=r"same number of heads in every layer, got \[2, 4\]"):
        with head_gates(mixed):
            pass
