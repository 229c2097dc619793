"""Mixture of experts (course_lib.moe): routing, the balancing loss against Hugging Face's,
capacity."""

from __future__ import annotations

import pytest
import torch

from course_lib import moe

pytestmark = pytest.mark.ch07


def test_gates_are_renormalised_and_sorted():
    w, e = moe.route(torch.randn(10, 6, dtype=torch.float64), k=3)
    assert torch.allclose(w.sum(-1), torch.ones(10, dtype=torch.float64))
    assert bool((w[:, :-1] >= w[:, 1:]).all())


def test_top1_gate_is_one():
    w, _ = moe.route(torch.randn(4, 5), k=1)
    assert torch.equal(w, torch.ones(4, 1))


@pytest.mark.parametrize("k", [1, 2])
def test_balancing_loss_equals_hugging_face(k):
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    logits = torch.randn(20, 4)
    expected = mixtral.load_balancing_loss_func((logits,), num_experts=4, top_k=k)
    assert torch.isclose(moe.load_balancing_loss(logits, k), expected, atol=1e-6)


def test_balancing_loss_extremes():
    assert float(moe.load_balancing_loss(torch.zeros(8, 4), 1)) == pytest.approx(1.0)
    collapsed = torch.tensor([[50.0, 0, 0, 0]]).repeat(8, 1)
    assert float(moe.load_balancing_loss(collapsed, 1)) == pytest.approx(4.0)


def test_block_equals_a_loop_over_tokens():
    torch.manual_seed(0)
    block = moe.SparseMoeBlock(hidden_size=6, intermediate_size=5, n_experts=4, k=2).double()
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    y = block(x).reshape(-1, 6)
    flat = x.reshape(-1, 6)
    w, e = moe.route(block.gate(flat), 2)
    for n in range(flat.shape[0]):
        out = 0
        for j in range(2):
            gate, up = (block.experts.gate_up_proj[e[n, j]] @ flat[n]).chunk(2)
            hidden = torch.nn.functional.silu(gate) * up
            out = out + w[n, j] * block.experts.down_proj[e[n, j]] @ hidden
        assert torch.allclose(y[n], out)


def test_capacity_and_dropped_tokens():
    assert moe.capacity(8, 4, 1, 1.0) == 2
    experts = torch.tensor([[0]] * 5 + [[1]] * 3)
    assert moe.dropped_fraction(experts, 4, 1.0) == pytest.approx((3 + 1) / 8)
    assert moe.dropped_fraction(experts, 4, 4.0) == 0.0


def test_bad_k_is_refused():
    with pytest.raises(ValueError, match="k must"):
        moe.route(torch.randn(3, 4), k=5)
