"""LoRA from scratch (course_lib.lora) against the peft library's LoRA layer, same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib import gpt, lora

pytestmark = pytest.mark.ch08


class _Tiny(nn.Module):
    """Two non-square linear maps, the second with a bias: what peft adapts here."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(6, 10, bias=False)
        self.down = nn.Linear(10, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def _peft_pair(r: int, alpha: float):
    """peft's LoRA model and ours on the same float64 base weights and adapters."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    base = _Tiny().double()
    ours = lora.add_lora(_Tiny().double(), r, alpha, targets=("up", "down"))
    ours.up.base.load_state_dict(base.up.state_dict())
    ours.down.base.load_state_dict(base.down.state_dict())
    config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=["up", "down"],
                             lora_dropout=0.0, bias="none")
    theirs = peft.get_peft_model(base, config).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in ("up", "down"):
            layer = getattr(theirs.base_model.model, name)
            a = torch.randn(layer.lora_A["default"].weight.shape, generator=g, dtype=torch.float64)
            b = torch.randn(layer.lora_B["default"].weight.shape, generator=g, dtype=torch.float64)
            layer.lora_A["default"].weight.copy_(a)  # peft: (r, in)
            layer.lora_B["default"].weight.copy_(b)  # peft: (out, r)
            getattr(ours, name).lora_A.copy_(a)
            getattr(ours, name).lora_B.copy_(b)
    return ours, theirs


@pytest.mark.parametrize("r,alpha", [(1, 1.0), (3, 8.0), (4, 2.0)])
def test_lora_equals_peft_and_so_does_the_merged_weight(r: int, alpha: float) -> None:
    ours, theirs = _peft_pair(r, alpha)
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        expected = theirs(x)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-10)
        assert theirs.base_model.model.up.scaling["default"] == ours.up.scaling == alpha / r
        lora.merge_all(ours)
        theirs.merge_adapter()
        for name in ("up", "down"):
            assert type(getattr(ours, name)) is nn.Linear
            torch.testing.assert_close(getattr(ours, name).weight,
                                       getattr(theirs.base_model.model, name).base_layer.weight,
                                       rtol=0, atol=1e-10)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-10)


def test_lora_forward_matches_the_dense_update_and_never_transposes_wrongly() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    f64 = torch.float64
    w, b = torch.randn(7, 5, generator=g, dtype=f64), torch.randn(7, generator=g, dtype=f64)
    a, bb = torch.randn(2, 5, generator=g, dtype=f64), torch.randn(7, 2, generator=g, dtype=f64)
    dense = x @ (w + 1.5 * bb @ a).T + b  # alpha / r = 3 / 2
    torch.testing.assert_close(lora.lora_forward(x, w, b, a, bb, 3.0), dense, rtol=0, atol=1e-12)
    torch.testing.assert_close(x @ lora.merge_lora(w, a, bb, 3.0).T + b, dense, rtol=0, atol=1e-12)


def test_bad_shapes_are_named() -> None:
    w = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="lora_a"):
        lora.lora_forward(torch.zeros(2, 3), w, None, torch.zeros(2, 4), torch.zeros(4, 2), 1.0)
    with pytest.raises(ValueError, match="features"):
        lora.lora_forward(torch.zeros(2, 5), w, None, torch.zeros(2, 3), torch.zeros(4, 2), 1.0)
    with pytest.raises(ValueError, match="rank"):
        lora.LoRALinear(nn.Linear(3, 4), r=0, alpha=1.0)
    with pytest.raises(ValueError, match="no nn.Linear"):
        lora.add_lora(nn.Sequential(nn.ReLU()), 2, 2.0)


def test_a_lora_gpt_starts_as_the_base_trains_only_adapters_and_merges_exactly() -> None:
    torch.manual_seed(0)
    config = gpt.GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = gpt.GPT(config).double()
    x = torch.randint(11, (3, 8), generator=torch.Generator().manual_seed(0))
    before = model(x).detach()
    lora.add_lora(model, r=2, alpha=4.0)
    torch.testing.assert_close(model(x), before, rtol=0, atol=0)  # B = 0
    d = config.n_embd
    per_layer = 2 * (d + 3 * d) + 2 * (d + d) + 2 * (d + 4 * d) + 2 * (4 * d + d)
    assert lora.trainable_parameters(model) == config.n_layer * per_layer
    assert lora.adam_state_bytes(model) == 2 * 8 * config.n_layer * per_layer  # float64
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    gpt.lm_loss(model(x), x).backward()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)
    optimizer.step()
    assert lora.optimizer_state_bytes(optimizer) == lora.adam_state_bytes(model)
    with torch.no_grad():
        adapted = model(x)
        assert (adapted - before).abs().max() > 1e-3  # the step changed the outputs
        lora.merge_all(model)
        assert not any(isinstance(m, lora.LoRALinear) for m in model.modules())
        torch.testing.assert_close(model(x), adapted, rtol=0, atol=1e-10)
