"""Counting a model on the ``meta`` device works (issue 30, item 6).

Building a model under ``torch.device("meta")`` and running it inside
``torch.utils.flop_counter.FlopCounterMode`` counts its FLOPs without allocating it (chapter 5's
subject). course_lib's input checks that read values (token ids in range, finite, positive) skip
meta tensors, which hold none; the checks of types and shapes still answer.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from course_lib import checks, flops, gpt


def test_gpt2_small_counts_its_flops_on_the_meta_device() -> None:
    config = gpt.GPTConfig()  # GPT-2 small, 124M parameters: never allocated here
    with torch.device("meta"):
        model = gpt.GPT(config)
        idx = torch.randint(0, config.vocab_size, (2, 128))
        targets = torch.randint(0, config.vocab_size, (2, 128))
    with FlopCounterMode(display=False) as forward:
        logits = model(idx)
    assert logits.device.type == "meta" and logits.shape == (2, 128, config.vocab_size)
    assert forward.get_total_flops() == flops.gpt_matmul_flops(config, 2, 128)["total"]
    with FlopCounterMode(display=False) as training:
        gpt.lm_loss(model(idx), targets).backward()
    # the backward pass costs twice the forward: the usual 6 N D of a training step
    assert training.get_total_flops() == 3 * forward.get_total_flops()
    assert model.step(idx).shape == (2, config.vocab_size)


def test_value_checks_skip_meta_tensors_and_shape_checks_still_answer() -> None:
    with torch.device("meta"):
        ids, x = torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3)
    assert checks.check_ids("idx", ids, 11) is ids
    assert checks.check_finite_tensor("x", x) is x
    assert checks.check_positive_tensor("x", x) is x
    with pytest.raises(TypeError, match="idx"):
        checks.check_ids("idx", x, 11)
    with pytest.raises(ValueError, match="idx"):
        checks.check_ids("idx", ids, 11, ndim=3)
    with pytest.raises(ValueError, match="outside"):  # on a real device the values are read
        checks.check_ids("idx", torch.tensor([[0, 11]]), 11)
