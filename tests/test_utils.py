"""Tests of course_lib.utils: device choice, seeding, quick mode."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from course_lib import utils


def test_get_device_honours_an_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    assert utils.get_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert utils.get_device() == torch.device("cpu")


def test_get_device_prefers_cuda_then_mps_then_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert utils.get_device().type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert utils.get_device().type == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert utils.get_device().type == "cpu"


def test_seed_everything_makes_every_generator_repeat() -> None:
    def draw(gen: torch.Generator) -> tuple:
        return (random.random(), np.random.rand(), torch.rand(1).item(),
                torch.rand(1, generator=gen).item())
    first = draw(utils.seed_everything(7))
    second = draw(utils.seed_everything(7))
    assert first == second
    assert draw(utils.seed_everything(8)) != first


@pytest.mark.parametrize("value, quick", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_quick_mode_and_pick(monkeypatch: pytest.MonkeyPatch, value: str, quick: bool) -> None:
    monkeypatch.setenv(utils.QUICK_ENV, value)
    assert utils.quick_mode() is quick
    assert utils.pick(1000, 10) == (10 if quick else 1000)
