"""A small, generic training loop: Adam(W), gradient clipping, a progress bar, loss history.

Taught in chapter 1 (training the encoder-decoders), reused by the later chapters.

The loop knows nothing about the model: it takes a ``loss_fn(model, batch) -> scalar tensor``,
an iterable of batches (moved to the model's device when they have a ``.to``), and optionally a
``validate(model) -> {metric: value}`` hook called every ``eval_every`` steps in ``eval`` mode
without gradients. It returns a :class:`History` that :func:`course_lib.plotting.plot_loss_curves`
draws.

Example:
    >>> model = torch.nn.Linear(1, 1)
    >>> data = [(torch.ones(4, 1), 3 * torch.ones(4, 1))]
    >>> loss = lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()
    >>> hist = train(model, data, loss, TrainConfig(steps=200, lr=0.1, progress=False))
    >>> hist.train_loss[-1] < 1e-3
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

LossFn = Callable[[nn.Module, Any], torch.Tensor]
ValidateFn = Callable[[nn.Module], dict[str, float]]


@dataclass(frozen=True)
class TrainConfig:
    """How to train."""

    steps: int = 1000  # optimiser steps (one batch each)
    lr: float = 3e-3  # peak learning rate of AdamW
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW's moment decay rates
    grad_clip: float | None = 1.0  # clip the global gradient norm to this; None: no clipping
    warmup_steps: int = 0  # linear warm-up from 0 to lr over these steps
    schedule: str = "constant"  # after warm-up: "constant" or "cosine" (decay to 10% of lr)
    eval_every: int = 0  # call validate every this many steps (and at the end); 0: only at the end
    seed: int | None = 0  # seeds torch before the first step (dropout, sampling); None: leave it
    progress: bool = True  # show a tqdm progress bar
    desc: str = "training"  # the progress bar's label


@dataclass
class History:
    """What happened during training.

    Attributes:
        steps: 1-based step of each entry of ``train_loss``.
        train_loss: the training loss of every step (the batch's mean loss).
        grad_norm: the global gradient norm of every step, before clipping.
        lr: the learning rate of every step.
        val_steps: the steps at which ``validate`` ran.
        val: metric name -> its value at each of ``val_steps``.
        seconds: wall-clock time of the whole run.
    """

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0

    def last(self, metric: str) -> float:
        """The latest value of a validation metric."""
        if not self.val.get(metric):
            raise KeyError(f"no validation metric {metric!r}; have {sorted(self.val)}")
        return self.val[metric][-1]


def lr_at(step: int, config: TrainConfig) -> float:
    """The learning rate of (0-based) ``step``: linear warm-up, then constant or cosine."""
    if config.warmup_steps > 0 and step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "cosine":
        span = max(1, config.steps - config.warmup_steps)
        progress = min(1.0, (step - config.warmup_steps) / span)
        return config.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"schedule must be 'constant' or 'cosine', got {config.schedule!r}")


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _endless(batches: Iterable[Any]) -> Iterable[Any]:
    """Cycle through ``batches``; an iterator that is used up cannot be restarted."""
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("the batches ran out (an exhausted iterator, or an empty list); pass "
                             "a list, a re-iterable loader, or an endless iterator")


def train(model: nn.Module, batches: Iterable[Any], loss_fn: LossFn,
          config: TrainConfig = TrainConfig(), validate: ValidateFn | None = None,
          optimizer: torch.optim.Optimizer | None = None) -> History:
    r"""Train ``model`` for ``config.steps`` steps and return the loss history.

    Each step: :math:`\theta \leftarrow \mathrm{AdamW}(\theta, \nabla_\theta L)` on one batch,
    with the gradient's global norm clipped to ``grad_clip`` (Pascanu et al., 2013), which keeps
    recurrent networks from the occasional exploding step.

    Args:
        model: any ``nn.Module``; put in ``train`` mode for the steps.
        batches: an iterable of batches, cycled when it ends (a list, a ``DataLoader``, or an
            endless iterator such as :func:`course_lib.data.batch_iterator`).
        loss_fn: ``(model, batch) -> scalar loss``.
        config: steps, learning rate, clipping, schedule, progress bar.
        validate: ``model -> {name: value}``, run every ``config.eval_every`` steps and at the end.
        optimizer: use this one instead of AdamW built from ``config``; its learning rate is
            still set at every step from ``config`` (``lr``, warm-up, schedule).

    Returns:
        The :class:`History` of the run.
    """
    if config.steps < 0:
        raise ValueError(f"steps must be >= 0, got {config.steps}")
    if config.seed is not None:
        torch.manual_seed(config.seed)
    device = _device_of(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        if not params:
            raise ValueError("the model has no trainable parameters")
        optimizer = torch.optim.AdamW(params, lr=config.lr, betas=config.betas,
                                      weight_decay=config.weight_decay)
    history = History()
    start = time.perf_counter()

    def run_validation(step: int) -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            metrics = validate(model)  # type: ignore[misc]
        model.train()
        history.val_steps.append(step)
        for name, value in metrics.items():
            history.val.setdefault(name, []).append(float(value))
        return metrics

    model.train()
    data = iter(_endless(batches))
    bar = tqdm(range(config.steps), desc=config.desc, disable=not config.progress,
               mininterval=1.0, leave=True)
    for step in bar:
        batch = next(data)
        if hasattr(batch, "to"):
            batch = batch.to(device)
        lr = lr_at(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, batch)
        if loss.dim() != 0:
            raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = config.grad_clip if config.grad_clip is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, clip) if params else torch.zeros(())
        optimizer.step()
        history.steps.append(step + 1)
        history.train_loss.append(float(loss.detach()))
        history.grad_norm.append(float(norm))
        history.lr.append(lr)
        postfix = {"loss": f"{history.train_loss[-1]:.3f}"}
        if validate is not None and config.eval_every > 0 and (step + 1) % config.eval_every == 0 \
                and step + 1 < config.steps:
            postfix.update({k: f"{v:.3f}" for k, v in run_validation(step + 1).items()})
        bar.set_postfix(postfix, refresh=False)
    bar.close()
    if validate is not None:
        run_validation(config.steps)
    history.seconds = time.perf_counter() - start
    return history
