"""Tests of course_lib.copying: the task's layout, causal models of matched size, training that
learns, greedy decoding agreeing with the teacher-forced verdict, determinism, bad input, and the
structure of compare_copying's result."""

from __future__ import annotations

import re

import pytest
import torch

from course_lib import copying as cp

pytestmark = pytest.mark.ch04

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TASK = cp.CopyTask(alphabet_size=16)
PARAM_TOLERANCE = 0.02  # "about the same size": within 2% of the Transformer's parameter count


def _batch(length: int = 6, batch_size: int = 50, seed: int = 0, **kwargs) -> cp.CopyBatch:
    return cp.make_copy_batch(TASK, length, batch_size, torch.Generator().manual_seed(seed),
                              **kwargs)


@pytest.mark.parametrize("min_length", [None, 1, 5])
def test_each_row_is_bos_string_sep_string_then_padding(min_length: int | None) -> None:
    b = _batch(length=9, batch_size=40, min_length=min_length)
    assert b.inputs.shape == b.targets.shape == b.loss_mask.shape == (40, 19)
    assert b.inputs.dtype == torch.long and b.loss_mask.dtype == torch.bool
    sequences = torch.cat([b.inputs[:, :1], b.targets], dim=1)  # (B, 2N+2)
    assert torch.equal(sequences[:, 1:], b.targets) and torch.equal(sequences[:, :-1], b.inputs)
    for row, n in zip(sequences.tolist(), b.lengths.tolist()):
        assert (min_length or 9) <= n <= 9
        string = row[1:n + 1]
        assert row[0] == TASK.bos and row[n + 1] == TASK.sep
        assert all(0 <= s < TASK.alphabet_size for s in string)
        assert row[n + 2:2 * n + 2] == string
        assert row[2 * n + 2:] == [TASK.pad] * (2 * 9 - 2 * n)


def test_the_loss_mask_scores_exactly_the_copy() -> None:
    b = _batch(length=7, batch_size=30, min_length=1)
    assert torch.equal(b.loss_mask.sum(dim=1), b.lengths)
    for mask, target, inputs, n in zip(b.loss_mask, b.targets, b.inputs, b.lengths.tolist()):
        assert torch.equal(target[mask], inputs[1:n + 1])  # the scored targets are the string
        assert inputs[mask][0] == TASK.sep  # the first scored position reads SEP


def test_batches_are_deterministic_from_the_seed_and_uniform() -> None:
    a, b, c = _batch(seed=3), _batch(seed=3), _batch(seed=4)
    assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)
    symbols = _batch(length=50, batch_size=200).inputs[:, 1:51]
    counts = torch.bincount(symbols.flatten(), minlength=TASK.vocab_size)
    assert counts[TASK.alphabet_size:].sum() == 0
    expected = symbols.numel() / TASK.alphabet_size  # 625 per symbol
    assert (counts[:TASK.alphabet_size] - expected).abs().max() < 5 * expected ** 0.5


def test_mixed_lengths_cover_the_range() -> None:
    lengths = _batch(length=8, batch_size=400, min_length=1).lengths
    assert set(lengths.tolist()) == set(range(1, 9))


def test_window_embedding_sees_its_window_and_nothing_later() -> None:
    torch.manual_seed(0)
    embed = cp.WindowEmbedding(TASK.vocab_size, 8, window=3, pad_id=TASK.pad)
    ids = torch.randint(TASK.alphabet_size, (1, 10))
    base = embed(ids)
    changed = ids.clone()
    changed[0, 5] = (ids[0, 5] + 1) % TASK.alphabet_size
    moved = (embed(changed) - base).abs().amax(dim=-1)[0]  # (T,)
    assert torch.equal(moved > 0, torch.tensor([t in (5, 6, 7) for t in range(10)]))
    # Before the start the window holds PAD: position 0 = E_0[x_0] + E_1[PAD] + E_2[PAD].
    t = embed.tables
    manual = t[0].weight[ids[0, 0]] + t[1].weight[TASK.pad] + t[2].weight[TASK.pad]
    torch.testing.assert_close(base[0, 0], manual)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make", [lambda: cp.CopyTransformer(TASK, 16, n_layer=2, n_head=2),
                                  lambda: cp.CopyGRU(TASK, 16, hidden_size=12)])
def test_models_are_causal_with_the_right_shapes(make, device: str) -> None:
    torch.manual_seed(0)
    model = make().to(device).eval()
    ids = torch.randint(TASK.alphabet_size, (3, 12), device=device)
    logits = model(ids)
    assert logits.shape == (3, 12, TASK.vocab_size) and logits.device.type == device
    changed = ids.clone()
    changed[:, 7] = (ids[:, 7] + 1) % TASK.alphabet_size
    torch.testing.assert_close(model(changed)[:, :7], logits[:, :7])
    assert not torch.allclose(model(changed)[:, 7:], logits[:, 7:])


def test_the_default_models_have_about_the_same_number_of_parameters() -> None:
    transformer, gru = cp.CopyTransformer(TASK), cp.CopyGRU(TASK)
    n_t, n_g = cp.count_params(transformer), cp.count_params(gru)
    assert abs(n_g - n_t) / n_t <= PARAM_TOLERANCE, (n_t, n_g)
    # GRU: 3 gates x (d H + H^2 + 2 H), window tables w V d, head H V + V.
    d, H, w, V = 64, 100, 6, TASK.vocab_size
    assert n_g == 3 * (d * H + H * H + 2 * H) + w * V * d + H * V + V
    assert gru.state_floats == H
    # Transformer: w V d + one GPT block (12 d^2 + 13 d) + final LayerNorm 2 d + head d V.
    assert n_t == w * V * d + 12 * d * d + 13 * d + 2 * d + d * V


def _trained_transformer(steps: int = 120) -> cp.CopyTransformer:
    torch.manual_seed(0)
    model = cp.CopyTransformer(TASK, d_model=32)
    cp.train_copy(model, TASK, max_length=6, steps=steps, batch_size=32, lr=1e-2, seed=0)
    return model


def test_a_short_training_run_learns_to_copy() -> None:
    torch.manual_seed(0)
    model = cp.CopyTransformer(TASK, d_model=32)
    before = cp.copy_accuracy(model, TASK, 4, n_strings=100)
    losses = cp.train_copy(model, TASK, max_length=6, steps=120, batch_size=32, lr=1e-2, seed=0)
    after = cp.copy_accuracy(model, TASK, 4, n_strings=100)
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    assert before < 0.05 and after > 0.5, (before, after)  # chance: 16^-4


def test_greedy_decoding_agrees_with_the_teacher_forced_verdict() -> None:
    model = _trained_transformer(steps=60).eval()  # half-trained: some copies right, some wrong
    batch = _batch(length=6, batch_size=200, seed=9)
    strings = batch.inputs[:, 1:7]
    copies = cp.greedy_copy(model, TASK, strings)
    greedy_right = (copies == strings).all(dim=1)
    with torch.no_grad():
        predicted = model(batch.inputs).argmax(-1)
    forced_right = ((predicted == batch.targets) | ~batch.loss_mask).all(dim=1)
    assert 0 < int(greedy_right.sum()) < 200, "want both outcomes to compare"
    assert torch.equal(greedy_right, forced_right)


def test_training_is_deterministic_for_a_seed() -> None:
    def run(seed: int) -> list[float]:
        torch.manual_seed(0)
        model = cp.CopyGRU(TASK, 16, hidden_size=16)
        return cp.train_copy(model, TASK, max_length=5, steps=5, batch_size=8, seed=seed)

    assert run(0) == run(0) and run(0) != run(1)


def test_copy_accuracy_counts_exact_matches() -> None:
    class Oracle(torch.nn.Module):  # copies right; when spoiled, misses the last symbol
        def __init__(self, spoil: bool) -> None:
            super().__init__()
            self.spoil, self.w = spoil, torch.nn.Parameter(torch.zeros(()))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            n = (ids.shape[1] - 1) // 2
            predicted = torch.zeros_like(ids)
            predicted[:, n + 1:] = ids[:, 1:n + 1]  # position n+k predicts s_k
            if self.spoil:
                predicted[:, -1] = (predicted[:, -1] + 1) % TASK.alphabet_size
            return torch.nn.functional.one_hot(predicted, TASK.vocab_size).float() + self.w

    assert cp.copy_accuracy(Oracle(False), TASK, 5, n_strings=30) == 1.0
    assert cp.copy_accuracy(Oracle(True), TASK, 5, n_strings=30) == 0.0


@pytest.mark.parametrize("call, error", [
    (lambda: cp.CopyTask(alphabet_size=1), "at least 2"),
    (lambda: cp.CopyTask(alphabet_size=2.0), "must be an int"),
    (lambda: _batch(length=0), "length must be at least 1"),
    (lambda: _batch(length=3, min_length=4), "exceeds length"),
    (lambda: _batch(batch_size=0), "batch_size must be at least 1"),
    (lambda: cp.CopyTransformer(TASK, 8)(torch.tensor([[0, TASK.vocab_size]])), "token ids"),
    (lambda: cp.CopyGRU(TASK, 8, 4)(torch.zeros(3, dtype=torch.long)), "(batch, length)"),
    (lambda: cp.greedy_copy(cp.CopyGRU(TASK, 8, 4), TASK, torch.tensor([[TASK.sep]])),
     "token ids"),
    (lambda: cp.copy_accuracy(cp.CopyGRU(TASK, 8, 4), TASK, 0), "length must be at least 1"),
    (lambda: cp.train_copy(cp.CopyGRU(TASK, 8, 4), TASK, max_length=3, steps=0), "steps"),
    (lambda: cp.compare_copying(seed=-1, quick=True), "seed"),
    (lambda: cp.WindowEmbedding(5, 4, window=0, pad_id=0), "window must be at least 1"),
])
def test_bad_input_gets_a_clear_error(call, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(error)):
        call()


def test_compare_copying_quick_has_the_documented_structure() -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    result = cp.compare_copying(seed=0, device="cpu", quick=True)
    assert torch.equal(torch.get_rng_state(), state), "the caller's random state changed"
    assert set(result) == {"lengths", "train_max_length", "accuracy", "params", "state_floats",
                           "steps", "models"}
    assert isinstance(result["models"]["transformer"], cp.CopyTransformer)
    lengths = result["lengths"]
    assert lengths == sorted(lengths) and all(isinstance(n, int) and n >= 1 for n in lengths)
    assert isinstance(result["train_max_length"], int)
    assert min(lengths) <= result["train_max_length"] < max(lengths)
    assert set(result["accuracy"]) == {"transformer", "gru"}
    for accuracies in result["accuracy"].values():
        assert len(accuracies) == len(lengths)
        assert all(isinstance(a, float) and 0.0 <= a <= 1.0 for a in accuracies)
    params = result["params"]
    assert set(params) == {"transformer", "gru"}
    assert all(isinstance(v, int) for v in params.values())
    assert abs(params["gru"] - params["transformer"]) / params["transformer"] <= PARAM_TOLERANCE
    assert result["state_floats"] == {"gru": cp.CopyingSetup().hidden_size}
    again = cp.compare_copying(seed=0, quick=True)  # deterministic for a seed
    assert {k: v for k, v in again.items() if k != "models"} == \
        {k: v for k, v in result.items() if k != "models"}


def test_max_copy_length_is_the_largest_n_with_a_to_the_n_at_most_2_to_the_s() -> None:
    for floats, bits, a in [(3, 1, 2), (100, 32, 16), (1, 8, 10), (7, 5, 3), (2, 16, 1000)]:
        n = cp.max_copy_length(floats, bits, a)
        assert a ** n <= 2 ** (floats * bits) < a ** (n + 1)


def test_attention_map_is_causal_and_sums_to_one() -> None:
    model = cp.CopyTransformer(TASK, d_model=8, n_head=2)
    ids = torch.randint(TASK.alphabet_size, (2, 6), generator=torch.Generator().manual_seed(0))
    weights = cp.attention_map(model, ids)
    assert weights.shape == (2, 2, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))
    assert torch.all(weights.triu(diagonal=1) == 0)
