"""Fast tests of bench/train_shakespeare.py's pieces (no timings are asserted): the recipes, the
learning-rate schedules, the data split and the fixed validation windows, a 3-step run on a tiny
slice of the corpus, and the command line."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.ch04

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("train_shakespeare",
                                               ROOT / "bench" / "train_shakespeare.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["train_shakespeare"] = bench
_spec.loader.exec_module(bench)

TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, "
             "speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n") * 8


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "input.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def test_the_baseline_is_nanogpts_readme_cpu_recipe() -> None:
    b = bench.BASELINE
    assert (b.n_layer, b.n_head, b.n_embd, b.block_size, b.batch_size) == (4, 4, 128, 64, 12)
    assert (b.lr, b.max_iters, b.dropout) == (1e-3, 2000, 0.0)
    # config/train_shakespeare_char.py and train.py: min_lr, warm-up, beta2, decay, clip, bias
    assert (b.min_lr, b.warmup, b.betas, b.weight_decay, b.grad_clip, b.bias) == \
        (1e-4, 100, (0.9, 0.99), 0.1, 1.0, False)
    assert b.schedule == "iters" and b.threads == 2


def test_the_tuned_recipe_is_the_documented_one() -> None:
    b, t = bench.BASELINE, bench.TUNED
    same = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "betas", "weight_decay",
            "grad_clip", "dropout", "bias", "threads")
    assert all(getattr(t, name) == getattr(b, name) for name in same)
    assert (t.lr, t.min_lr, t.warmup, t.schedule, t.max_iters, t.bf16) == \
        (6e-3, 1e-4, 5.0, "time", None, False)


def test_the_recipes_build_models_of_the_documented_size() -> None:
    model = bench.build_model(bench.BASELINE, 65)
    n_params = sum(p.numel() for p in model.parameters())
    d, L, V, T = 128, 4, 65, 64  # no biases: 12 d^2 + 2 d per block, final LayerNorm d
    assert n_params == V * d + T * d + L * (12 * d * d + 2 * d) + d
    for recipe in bench.RECIPES.values():
        assert recipe.name in bench.RECIPES and recipe.threads >= 1
        built = bench.build_model(recipe, 65)
        if recipe.block == "gpt":
            assert built.config.block_size >= max(recipe.block_size, bench.EVAL_BLOCK)
        else:
            assert built.config.max_position_embeddings >= max(recipe.block_size, bench.EVAL_BLOCK)


def test_the_modern_recipe_is_the_ladders_best_block_in_the_tuned_recipe() -> None:
    """Chapter 7's block (RoPE, RMSNorm, SwiGLU of width 8d/3, no biases, tied embeddings) with
    the tuned recipe's size, batches and schedule at the ladder's learning rate; its parameters
    within 1% of the GPT's."""
    t, m = bench.TUNED, bench.MODERN
    same = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "min_lr", "warmup",
            "schedule", "max_iters", "betas", "weight_decay", "grad_clip", "dropout", "threads")
    assert all(getattr(m, name) == getattr(t, name) for name in same)
    assert m.lr == 3e-3  # the ladder's learning rate (chapter 7's scripts/modern_decoder_runs.py)
    model = bench.build_model(m, 65)
    c = model.config
    assert (c.position, c.norm, c.mlp, c.intermediate_size) == ("rope", "rms", "swiglu", 342)
    assert c.num_key_value_heads == c.num_attention_heads and c.tie_word_embeddings
    gpt = bench.build_model(t, 65)
    n_m, n_g = (sum(p.numel() for p in x.parameters()) for x in (model, gpt))
    assert abs(n_m / n_g - 1) < 0.01
    x = torch.randint(65, (2, bench.EVAL_BLOCK))
    assert model(x).shape == (2, bench.EVAL_BLOCK, 65)


def test_nanogpt_schedule_warms_up_then_decays_to_min_lr() -> None:
    b = bench.BASELINE
    assert b.lr_at(0, 0.0, 180.0) == pytest.approx(b.lr / 101)  # nanoGPT: lr (it+1)/(warmup+1)
    assert b.lr_at(99, 0.0, 180.0) == pytest.approx(b.lr * 100 / 101)
    assert b.lr_at(100, 0.0, 180.0) == pytest.approx(b.lr)
    assert b.lr_at(1050, 0.0, 180.0) == pytest.approx((b.lr + b.min_lr) / 2)
    assert b.lr_at(2000, 0.0, 180.0) == pytest.approx(b.min_lr)
    lrs = [b.lr_at(i, 0.0, 180.0) for i in range(100, 2001, 50)]
    assert all(x >= y for x, y in zip(lrs, lrs[1:]))


def test_time_schedule_ends_at_min_lr_when_the_budget_ends() -> None:
    r = bench.Recipe(name="t", n_layer=1, n_head=1, n_embd=8, block_size=8, batch_size=2,
                     lr=2e-3, min_lr=1e-4, warmup=10.0, schedule="time")
    assert r.lr_at(0, 5.0, 100.0) == pytest.approx(1e-3)  # half-way through the warm-up
    assert r.lr_at(7, 10.0, 100.0) == pytest.approx(2e-3)
    assert r.lr_at(7, 55.0, 100.0) == pytest.approx((2e-3 + 1e-4) / 2)
    assert r.lr_at(7, 100.0, 100.0) == pytest.approx(1e-4)
    assert r.lr_at(7, 130.0, 100.0) == pytest.approx(1e-4)
    assert 0 < r.lr_at(0, 0.0, 100.0) < 1e-5


@pytest.mark.parametrize("kwargs, error", [
    (dict(schedule="linear"), "schedule"),
    (dict(schedule="iters", max_iters=None), "max_iters"),
    (dict(n_head=3), "divisible"),
    (dict(batch_size=0), "batch_size"),
    (dict(block="mamba"), "block"),
])
def test_bad_recipes_are_refused(kwargs: dict, error: str) -> None:
    base = dict(name="x", n_layer=1, n_head=2, n_embd=8, block_size=8, batch_size=2, lr=1e-3,
                min_lr=1e-4, warmup=1.0, schedule="time")
    with pytest.raises(ValueError, match=error):
        bench.Recipe(**{**base, **kwargs})


def test_data_split_is_nanogpts_and_the_validation_windows_are_fixed(corpus: Path) -> None:
    data = bench.load_data(corpus, eval_windows=7)
    vocabulary = sorted(set(TINY_TEXT))
    n = int(0.9 * len(TINY_TEXT))
    assert data.vocabulary == vocabulary
    assert "".join(vocabulary[i] for i in data.train.tolist()) == TINY_TEXT[:n]
    assert "".join(vocabulary[i] for i in data.val.tolist()) == TINY_TEXT[n:]
    assert data.val_x.shape == data.val_y.shape == (7, bench.EVAL_BLOCK)
    assert torch.equal(data.val_x[:, 1:], data.val_y[:, :-1])
    again = bench.load_data(corpus, eval_windows=7)
    assert torch.equal(data.val_x, again.val_x)
    val = "".join(vocabulary[i] for i in data.val.tolist())
    for row in data.val_x:  # every window is a piece of the validation text
        assert "".join(vocabulary[i] for i in row.tolist()) in val


def test_missing_or_tiny_corpus_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--corpus"):
        bench.load_data(tmp_path / "nope.txt")
    (tmp_path / "short.txt").write_text("to be or not to be", encoding="utf-8")
    with pytest.raises(ValueError, match="too few"):
        bench.load_data(tmp_path / "short.txt")


def test_a_three_step_run_on_a_tiny_slice(corpus: Path) -> None:
    data = bench.load_data(corpus, eval_windows=5)
    lines: list[str] = []
    threads = torch.get_num_threads()
    try:
        result = bench.run_recipe(bench.BASELINE, data, seconds=600.0, marks=[200.0, 400.0, 600.0],
                                  eval_every=0.0, max_steps=3, log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert result.iterations == 3 and result.finished_at is not None
    assert len(result.curve) == 1 and result.curve[0][1] == 3
    loss = result.curve[0][2]
    assert math.isfinite(loss) and abs(loss - math.log(len(data.vocabulary))) < 1.0
    assert result.at_marks == {200.0: loss, 400.0: loss, 600.0: loss}  # it ended before them
    assert any("iter      3" in line for line in lines)


def test_evaluation_is_the_mean_loss_over_the_fixed_windows(corpus: Path) -> None:
    data = bench.load_data(corpus, eval_windows=6)
    torch.manual_seed(0)
    model = bench.build_model(bench.BASELINE, len(data.vocabulary))
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(
            model(data.val_x).flatten(0, 1), data.val_y.flatten()).item()
    assert bench.evaluate(model, data, batch_size=4) == pytest.approx(expected, rel=1e-5)


def test_the_command_line_runs_both_recipes_and_prints_the_table(corpus: Path) -> None:
    lines: list[str] = []
    threads = torch.get_num_threads()
    try:
        results = bench.main(["--corpus", str(corpus), "--seconds", "600", "--max-steps", "2",
                              "--eval-windows", "3", "--eval-every", "0"], log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert set(results) == {"baseline", "tuned", "modern"}
    text = "\n".join(lines)
    assert "command: bench/train_shakespeare.py --corpus" in text
    assert '"name": "baseline"' in text and '"name": "tuned"' in text  # the configurations
    assert "load average" in text and "tuned vs baseline" in text
    assert "modern vs baseline" in text and "modern vs tuned" in text
    assert "200 s" in text and "400 s" in text and "600 s" in text


@pytest.mark.parametrize("argv, error", [
    (["--recipes", "baseline,fast"], "unknown"),
    (["--recipes", ","], "empty"),
    (["--seconds", "0"], "positive"),
    (["--threads", "0"], "at least 1"),
    (["--clock", "gpu"], "invalid choice"),
])
def test_bad_arguments_are_refused(argv: list[str], error: str, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert error in capsys.readouterr().err


def test_default_marks_are_60_120_180() -> None:
    assert bench.default_marks(180.0) == [60.0, 120.0, 180.0]
    assert bench.parse_args([]).recipe_list == [bench.BASELINE, bench.TUNED, bench.MODERN]


def test_cpu_clock_and_threads_options(corpus: Path) -> None:
    args = bench.parse_args(["--clock", "cpu", "--threads", "1", "--recipes", "modern"])
    assert args.clock == "cpu" and args.recipe_list == [replace(bench.MODERN, threads=1)]
    lines: list[str] = []
    threads = torch.get_num_threads()
    try:
        results = bench.main(["--corpus", str(corpus), "--seconds", "600", "--max-steps", "2",
                              "--eval-windows", "3", "--eval-every", "0", "--clock", "cpu",
                              "--threads", "1", "--recipes", "modern"], log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert results["modern"].iterations == 2 and math.isfinite(results["modern"].curve[-1][2])
