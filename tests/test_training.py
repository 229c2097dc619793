"""Tests of course_lib.training: the generic loop."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.training import History, TrainConfig, lr_at, train


def regression_problem(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    return batches, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()


def test_loss_goes_down_and_history_is_complete() -> None:
    batches, loss = regression_problem()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    calls = []

    def validate(m):
        calls.append(m.training)
        return {"mse": float(loss(m, batches[0]))}

    hist = train(model, batches, loss, TrainConfig(steps=300, lr=0.05, eval_every=100,
                                                   progress=False), validate=validate)
    assert hist.steps == list(range(1, 301))
    assert len(hist.train_loss) == len(hist.grad_norm) == len(hist.lr) == 300
    assert hist.train_loss[-1] < 1e-3 < hist.train_loss[0]
    assert hist.val_steps == [100, 200, 300] and calls == [False, False, False]
    assert hist.last("mse") < 1e-3 and model.training
    assert hist.seconds > 0
    with pytest.raises(KeyError):
        hist.last("accuracy")


def test_runs_are_reproducible_with_a_seed() -> None:
    batches, loss = regression_problem()

    def run() -> History:
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5),
                                    torch.nn.Linear(8, 1))
        return train(model, batches, loss, TrainConfig(steps=20, seed=7, progress=False))

    assert run().train_loss == run().train_loss


def test_gradient_clipping_bounds_the_update() -> None:
    # With SGD(lr=1) the first update equals the clipped gradient: its norm is at most grad_clip.
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    batches = [(torch.ones(1, 1), 1000 * torch.ones(1, 1))]

    def loss(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return ((m(b[0]) - b[1]) ** 2).mean()

    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    hist = train(model, batches, loss, TrainConfig(steps=1, lr=1.0, grad_clip=0.5, progress=False),
                 optimizer=opt)
    assert math.isclose(hist.grad_norm[0], 2000.0)  # d/dw (w - 1000)^2 at w = 0
    assert math.isclose(abs(model.weight.item()), 0.5, rel_tol=1e-6)


def test_learning_rate_schedules() -> None:
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, schedule="cosine")
    assert math.isclose(lr_at(0, cfg), 0.1) and math.isclose(lr_at(9, cfg), 1.0)
    assert math.isclose(lr_at(10, cfg), 1.0) and math.isclose(lr_at(100, cfg), 0.1)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 99))
    assert lr_at(50, TrainConfig(lr=0.3)) == 0.3
    with pytest.raises(ValueError, match="schedule"):
        lr_at(0, TrainConfig(schedule="linear"))


def test_exhausted_batches_are_a_clear_error() -> None:
    _, loss = regression_problem()
    gen = (b for b in [(torch.ones(2, 3), torch.ones(2, 1))])
    with pytest.raises(ValueError, match="ran out"):
        train(torch.nn.Linear(3, 1), gen, loss, TrainConfig(steps=3, progress=False))
