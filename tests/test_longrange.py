"""Tests of course_lib.longrange: the recall task is deterministic and correct, the four models
have the right shapes, attention learns the task, and the measured path lengths."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib import longrange as lr
from course_lib.multihead import MultiHeadAttention

pytestmark = pytest.mark.ch02

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _batch(config: lr.RecallConfig, n: int = 64, seed: int = 0) -> lr.RecallBatch:
    return lr.make_recall_batch(config, n, torch.Generator().manual_seed(seed))


def test_batches_are_deterministic_from_the_seed() -> None:
    config = lr.RecallConfig(length=20, n_pairs=5)
    a, b, c = _batch(config), _batch(config), _batch(config, seed=1)
    for field in ("keys", "values", "target", "distance"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert not torch.equal(a.keys, c.keys)


@pytest.mark.parametrize("length, n_pairs", [(2, 1), (10, 3), (33, 16)])
def test_the_target_is_the_value_stored_with_the_query_key(length: int, n_pairs: int) -> None:
    config = lr.RecallConfig(n_keys=16, n_values=7, length=length, n_pairs=n_pairs)
    b = _batch(config, 200)
    assert b.keys.shape == b.values.shape == (200, length)
    assert (b.values[:, -1] == config.query_value).all()
    for i in range(200):
        keys, values = b.keys[i, :-1], b.values[i, :-1]
        pairs = keys != config.filler_key
        assert int(pairs.sum()) == n_pairs
        assert (values[pairs] < config.n_values).all()
        assert (values[~pairs] == config.filler_value).all()
        assert len(set(keys[pairs].tolist())) == n_pairs, "keys of one sequence are distinct"
        (where,) = torch.nonzero(keys == b.keys[i, -1], as_tuple=True)
        assert where.numel() == 1
        assert int(values[where]) == int(b.target[i])
        assert int(b.distance[i]) == length - 1 - int(where)


def test_distances_cover_the_range() -> None:
    config = lr.RecallConfig(length=16, n_pairs=4)
    d = _batch(config, 2000).distance
    assert int(d.min()) == 1 and int(d.max()) == 15


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="n_pairs=9 must be between 1 and min"):
        lr.RecallConfig(n_keys=8, length=20, n_pairs=9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(lr.MODELS))
def test_models_give_logits_over_values(device: str, name: str) -> None:
    config = lr.RecallConfig(n_values=5, length=12, n_pairs=3)
    torch.manual_seed(0)
    model = lr.MODELS[name](config, d_model=16).to(device)
    b = _batch(config, 4).to(device)
    logits = model(b.keys, b.values)
    assert logits.shape == (4, 5) and logits.device.type == device
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_recurrent_and_convolutional_models_see_every_position() -> None:
    config = lr.RecallConfig(length=12, n_pairs=3)
    torch.manual_seed(0)
    for model in (lr.GRUModel(config, 16), lr.DilatedCNN(config, 16)):
        x = torch.randn(1, 12, 16, requires_grad=True)
        h = model.mix(x)  # the query's representation depends on every position (receptive field)
        (grad,) = torch.autograd.grad((h * torch.randn(h.shape)).sum(), x)
        assert (grad.abs().sum(-1) > 0).all()


def test_attention_weights_of_the_query_are_distributions() -> None:
    config = lr.RecallConfig(length=10, n_pairs=3)
    torch.manual_seed(0)
    model = lr.AttentionModel(config, d_model=16, n_heads=2)
    b = _batch(config, 3)
    w = model.attention_weights(b.keys, b.values)
    assert w.shape == (3, 2, 10)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 2))


@pytest.fixture()
def one_thread():
    """Tiny models train fastest on one thread (and do not fight parallel test workers)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_attention_learns_recall_and_linear_mixing_does_not(one_thread: None) -> None:
    torch.manual_seed(0)
    config = lr.RecallConfig(n_keys=8, n_values=8, length=12, n_pairs=4)
    train = lr.TrainConfig(steps=250, batch_size=64, lr=3e-3, seed=0)
    test = _batch(config, 500, seed=99)
    bins = torch.tensor([1, 4, 8, 12])
    accuracy = {}
    for name in ("attention", "linear mixing"):
        torch.manual_seed(0)
        model = lr.MODELS[name](config, d_model=32)
        losses = lr.train_recall(model, train)
        assert len(losses) == 250 and all(math.isfinite(x) for x in losses)
        _, acc, counts = lr.accuracy_by_distance(model, test, bins)
        assert int(counts.sum()) == 500
        accuracy[name] = float((acc * counts).sum() / counts.sum())
    assert accuracy["attention"] > 0.9, accuracy
    assert accuracy["linear mixing"] < 0.6, accuracy


def test_accuracy_by_distance_bins_and_empty_bins() -> None:
    config = lr.RecallConfig(length=8, n_pairs=2)

    class Oracle(lr.LinearMixer):
        """Right exactly when the asked pair is at most 2 positions back."""

        def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            match = keys[:, :-1] == keys[:, -1:]                   # (B, T-1), one True per row
            position = match.double().argmax(-1)
            stored = values[:, :-1].gather(1, position[:, None])[:, 0]
            near = (keys.shape[1] - 1 - position) <= 2
            guess = torch.where(near, stored, (stored + 1) % config.n_values)
            return nn.functional.one_hot(guess, config.n_values).double()

    b = _batch(config, 400)
    centres, acc, counts = lr.accuracy_by_distance(Oracle(config, 8), b,
                                                   torch.tensor([1, 3, 8, 20]))
    assert centres.tolist() == [2.0, 5.5, 14.0]
    assert acc[0] == 1.0 and acc[1] == 0.0 and math.isnan(acc[2]) and counts[2] == 0


def test_measured_path_lengths_follow_table_1() -> None:
    n = 16
    assert lr.layers_to_connect(lambda: _SelfAttention(4), n) == 1
    assert lr.layers_to_connect(lambda: lr.CausalConvLayer(4, kernel_size=3), n) == math.ceil(
        (n - 1) / 2)
    dilated = iter(range(10))
    assert lr.layers_to_connect(
        lambda: lr.CausalConvLayer(4, kernel_size=2, dilation=2 ** next(dilated)), n) == 4
    assert lr.layers_to_connect(lambda: _GRU(4), n) == 1


class _SelfAttention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.mha = MultiHeadAttention(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x)[0]


class _GRU(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.gru = nn.GRU(d, d, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(x)[0]
