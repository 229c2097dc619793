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


def test_the_modern_recipe_is_the_ladders_best_block_trained_with_muon() -> None:
    """Chapter 7's block (RoPE, RMSNorm, SwiGLU of width 8d/3, no biases) at the tuned GPT's
    width, depth and context with 2 heads and an untied output layer, its parameters within 1%
    of the GPT's, trained with Muon on the blocks' matrices (three Newton-Schulz steps, where
    Jordan et al. take five), batches of 24 windows drawn in
    passes over the text and a linear decay to zero over the budget."""
    t, m = bench.TUNED, bench.MODERN
    same = ("n_layer", "n_embd", "block_size", "warmup", "schedule", "max_iters", "betas",
            "grad_clip", "dropout", "threads")
    assert all(getattr(m, name) == getattr(t, name) for name in same)
    assert (m.optimizer, m.muon_lr, m.muon_momentum, m.muon_ns_steps, m.lr) == \
        ("muon", 0.01, 0.9, 3, 3e-3)
    assert bench.Recipe.muon_ns_steps == 5  # Jordan et al.'s five, unless a recipe says otherwise
    assert (m.batch_size, m.decay, m.min_lr, m.n_head, m.tie_embeddings, m.sampler) == \
        (24, "linear", 0.0, 2, False, "epochs")
    assert bench.BASELINE.sampler == t.sampler == "random"  # nanoGPT's sampling
    model = bench.build_model(m, 65)
    c = model.config
    assert (c.position, c.norm, c.mlp, c.intermediate_size) == ("rope", "rms", "swiglu", 342)
    assert c.num_key_value_heads == c.num_attention_heads == 2 and c.d_head == 64
    assert not c.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    gpt = bench.build_model(t, 65)
    n_m, n_g = (sum(p.numel() for p in x.parameters()) for x in (model, gpt))
    d, L, V, W = 128, 4, 65, 342  # per block: q, k, v, o, gate, up, down and two gains
    assert n_m == 2 * V * d + L * (4 * d * d + 3 * d * W + 2 * d) + d  # embedding, head: 805,248
    assert abs(n_m / n_g - 1) < 0.01
    x = torch.randint(65, (2, bench.EVAL_BLOCK))
    assert model(x).shape == (2, bench.EVAL_BLOCK, 65)
    tied = bench.build_model(replace(m, tie_embeddings=True), 65)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight


def _newton_schulz_float64(G: torch.Tensor, steps: int) -> torch.Tensor:
    """The quintic iteration written out for one matrix, in float64 (the reference)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.double().T if G.shape[0] > G.shape[1] else G.double()
    X = X / X.norm()
    for _ in range(steps):
        A = X @ X.T
        X = a * X + b * A @ X + c * A @ A @ X
    return X.T if G.shape[0] > G.shape[1] else X


@pytest.mark.parametrize("shape", [(3, 8, 20), (2, 20, 8), (6, 6)])
@pytest.mark.parametrize("steps", [3, 5])
def test_newton_schulz_is_the_quintic_iteration_and_orthogonalises(shape: tuple,
                                                                   steps: int) -> None:
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    X = bench.newton_schulz(G, steps=steps)
    batch = G.reshape(-1, *G.shape[-2:])
    expected = torch.stack([_newton_schulz_float64(g, steps) for g in batch]).reshape(G.shape)
    assert X.dtype == torch.float32 and X.shape == G.shape
    assert torch.allclose(X.double(), expected, atol=2e-5)
    a, b, c = bench.NS_COEFFICIENTS
    for g, x in zip(batch, X.reshape(-1, *G.shape[-2:])):
        U, S, Vh = torch.linalg.svd(g.double(), full_matrices=False)
        inner = U.T @ x.double() @ Vh.T  # diagonal when x = U S' V^T: G's singular vectors
        off = inner - torch.diag(torch.diagonal(inner))
        assert off.abs().max() < 1e-4
        # each singular value s goes through the scalar quintic p(s) = a s + b s^3 + c s^5,
        # ``steps`` times, from s / |G|_F
        s = S / S.square().sum().sqrt()
        for _ in range(steps):
            s = a * s + b * s**3 + c * s**5
        assert torch.allclose(torch.diagonal(inner), s, atol=1e-4)
        if steps == 5:  # five steps push every singular value into a band around 1, not onto 1
            assert 0.6 < float(s.min()) and float(s.max()) < 1.2


@pytest.mark.parametrize("ns_steps", [5, 3])
def test_muon_takes_torch_optim_muons_steps(ns_steps: int) -> None:
    """Three steps with the same gradients: the same updates as torch.optim.Muon (which
    orthogonalises in bfloat16, hence the 5% tolerance), tall, wide and square matrices, with
    five Newton-Schulz steps (both defaults) and with three (the modern recipe's)."""
    gen = torch.Generator().manual_seed(1)
    start = [torch.randn(8, 20, generator=gen), torch.randn(20, 8, generator=gen),
             torch.randn(8, 20, generator=gen), torch.randn(5, 5, generator=gen)]
    ours = [p.clone().requires_grad_() for p in start]
    theirs = [p.clone().requires_grad_() for p in start]
    opt_ours = bench.Muon(ours, lr=0.02, momentum=0.9, ns_steps=ns_steps)
    opt_theirs = torch.optim.Muon(theirs, lr=0.02, momentum=0.9, weight_decay=0.0,
                                  ns_steps=ns_steps)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=gen) for p in start]
        for params, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.step()
        for p, q, p0 in zip(ours, theirs, start):
            step_ours, step_theirs = p.detach() - p0, q.detach() - p0
            assert float((step_ours - step_theirs).norm() / step_theirs.norm()) < 0.05
    # a tall matrix's step is scaled by sqrt(rows / cols): 20 x 8 moves further than 8 x 20
    moved = [float((p.detach() - p0).norm()) for p, p0 in zip(ours, start)]
    assert moved[1] / moved[0] == pytest.approx(math.sqrt(20 / 8), rel=0.1)


@pytest.mark.parametrize("kwargs, error", [
    (dict(lr=0.0), "lr"), (dict(lr=float("nan")), "lr"), (dict(momentum=1.0), "momentum"),
    (dict(ns_steps=0), "ns_steps"), (dict(ns_steps=2.5), "ns_steps"),
    (dict(weight_decay=-0.1), "weight_decay"),
])
def test_muon_refuses_bad_settings(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        bench.Muon([torch.zeros(3, 3, requires_grad=True)], **kwargs)


def test_muon_refuses_vectors_and_newton_schulz_refuses_non_matrices() -> None:
    with pytest.raises(ValueError, match=r"matrices only.*\(4,\)"):
        bench.Muon([torch.zeros(4, requires_grad=True)])
    with pytest.raises(ValueError, match="floating-point matrices"):
        bench.newton_schulz(torch.zeros(4))
    with pytest.raises(ValueError, match="floating-point matrices"):
        bench.newton_schulz(torch.zeros(3, 3, dtype=torch.long))


def test_the_optimisers_split_the_parameters_as_documented() -> None:
    model = bench.build_model(bench.MODERN, 65)
    muon, adamw = bench.make_optimizers(model, bench.MODERN)
    assert isinstance(muon, bench.Muon) and isinstance(adamw, torch.optim.AdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    on_adamw = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert not on_muon & on_adamw and on_muon | on_adamw == set(names.values())
    assert on_adamw == {"model.embed_tokens.weight", "lm_head.weight"} | {
        n for n in names.values() if n.endswith("layernorm.weight") or n == "model.norm.weight"}
    assert len(on_muon) == 7 * bench.MODERN.n_layer  # q, k, v, o, gate, up, down per block
    assert muon.param_groups[0]["lr_scale"] == pytest.approx(bench.MODERN.muon_lr / bench.MODERN.lr)
    assert muon.param_groups[0]["ns_steps"] == bench.MODERN.muon_ns_steps
    four = bench.make_optimizers(model, replace(bench.MODERN, muon_ns_steps=4))[0]
    assert four.param_groups[0]["ns_steps"] == 4
    assert adamw.param_groups[0]["lr_scale"] == 1.0 and adamw.param_groups[0]["weight_decay"] == 0
    (gpt_adamw,) = bench.make_optimizers(bench.build_model(bench.TUNED, 65), bench.TUNED)
    assert [g["weight_decay"] for g in gpt_adamw.param_groups] == [0.1, 0.0]


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


def test_linear_decay_is_a_straight_line_from_lr_to_min_lr() -> None:
    r = bench.Recipe(name="t", n_layer=1, n_head=1, n_embd=8, block_size=8, batch_size=2,
                     lr=2e-3, min_lr=0.0, warmup=10.0, schedule="time", decay="linear")
    assert r.lr_at(0, 5.0, 100.0) == pytest.approx(1e-3)  # the same warm-up
    assert r.lr_at(7, 10.0, 100.0) == pytest.approx(2e-3)
    assert r.lr_at(7, 32.5, 100.0) == pytest.approx(1.5e-3)  # a quarter of the decay done
    assert r.lr_at(7, 77.5, 100.0) == pytest.approx(0.5e-3)
    assert r.lr_at(7, 100.0, 100.0) == 0.0


@pytest.mark.parametrize("kwargs, error", [
    (dict(schedule="linear"), "schedule"),
    (dict(decay="step"), "decay"),
    (dict(optimizer="sgd"), "optimizer"),
    (dict(muon_momentum=1.0), "muon_momentum"),
    (dict(muon_lr=-0.01), "muon_lr"),
    (dict(muon_ns_steps=0), "muon_ns_steps"),
    (dict(muon_ns_steps=2.5), "muon_ns_steps"),
    (dict(lr=float("inf")), "lr"),
    (dict(min_lr=2e-3), "min_lr"),
    (dict(grad_clip=-1.0), "grad_clip"),
    (dict(block="gpt", tie_embeddings=False), "tie_embeddings"),
    (dict(schedule="iters", max_iters=None), "max_iters"),
    (dict(n_head=3), "divisible"),
    (dict(batch_size=0), "batch_size"),
    (dict(block="mamba"), "block"),
    (dict(sampler="shuffled"), "sampler"),
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


def test_epoch_windows_serve_every_window_of_a_pass_once_then_start_another() -> None:
    """On the text 0, 1, ..., 40 with windows of 4: a pass is the windows that start at
    offset, offset + 4, ... (each needs 5 characters), served in a shuffled order, each once; the
    batch that outruns the pass is finished from the next pass, at a new offset."""
    ids = torch.arange(41)
    sampler = bench.EpochWindows(ids, 4, torch.Generator().manual_seed(3))
    starts: list[int] = []
    for _ in range(3):
        x, y = sampler.next(4)
        assert x.shape == y.shape == (4, 4)
        assert torch.equal(y, x + 1)  # the targets are the next characters
        assert torch.equal(x - x[:, :1], torch.arange(4).expand(4, 4))  # contiguous windows
        starts += x[:, 0].tolist()
    offset = starts[0] % 4
    first_pass = list(range(offset, 41 - 4, 4))  # the last start s has s + 4 <= 40
    n = len(first_pass)
    assert n in (9, 10) and sorted(starts[:n]) == first_pass
    assert starts[:n] != first_pass  # shuffled (this generator's order is not the text's)
    assert sampler.passes == 2 and len(set(starts[n:])) == 12 - n
    assert len({s % 4 for s in starts[n:]}) == 1  # the second pass: one offset of its own


def test_epoch_windows_are_reproducible_and_refuse_a_text_too_short() -> None:
    ids = torch.arange(200)
    a, b = (bench.EpochWindows(ids, 8, torch.Generator().manual_seed(5)) for _ in range(2))
    assert all(torch.equal(a.next(3)[0], b.next(3)[0]) for _ in range(10))
    with pytest.raises(ValueError, match="2 \\* block_size \\+ 1 = 17"):
        bench.EpochWindows(torch.arange(16), 8, torch.Generator())


def test_random_offsets_miss_a_fraction_exp_minus_passes_that_epochs_do_not() -> None:
    """The docstring's reason for passes: after k passes' worth of windows, independent random
    offsets leave about exp(-k) of the text unread; passes read every character k times (up to
    the offsets' edges)."""
    n, block, passes = 20_000, 10, 2
    ids = torch.arange(n)
    windows = passes * n // block
    gen = torch.Generator().manual_seed(0)
    x, _ = bench.random_windows(ids, block, windows, gen)
    unread = 1 - len(torch.unique(x)) / n
    assert unread == pytest.approx(math.exp(-passes), abs=0.01)
    sampler = bench.EpochWindows(ids, block, torch.Generator().manual_seed(0))
    counts = torch.bincount(sampler.next(windows)[0].flatten(), minlength=n)
    inner = counts[2 * block:-2 * block]
    assert int(inner.min()) == passes and int(inner.max()) <= passes + 1  # none unread


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


def test_a_muon_run_steps_every_parameter_and_grad_clip_0_does_not_clip(corpus: Path) -> None:
    data = bench.load_data(corpus, eval_windows=3)
    threads = torch.get_num_threads()
    seen: dict[str, list[float]] = {}
    original = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        seen.setdefault("clip", []).append(max_norm)
        return original(parameters, max_norm, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = spy
    try:
        for clip in (1.0, 0.0):
            recipe = replace(bench.MODERN, grad_clip=clip)
            result = bench.run_recipe(recipe, data, seconds=600.0, marks=[600.0], eval_every=0.0,
                                      max_steps=2, log=lambda line: None)
            assert result.iterations == 2 and math.isfinite(result.curve[-1][2])
    finally:
        torch.nn.utils.clip_grad_norm_ = original
        torch.set_num_threads(threads)
    assert seen["clip"] == [1.0, 1.0]  # two steps clipped at 1.0, none at 0
    torch.manual_seed(bench.MODERN.seed)
    model = bench.build_model(bench.MODERN, len(data.vocabulary))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizers = bench.make_optimizers(model, bench.MODERN)
    x, y = data.train[:64][None], data.train[1:65][None]
    bench.lm_loss(model(x), y).backward()
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 * group["lr_scale"]
        optimizer.step()
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters())


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


def test_set_changes_one_setting_of_one_recipe() -> None:
    args = bench.parse_args(["--recipes", "tuned,modern", "--set", "modern.muon_lr=0.02",
                             "--set", "modern.optimizer=adamw", "--set", "modern.batch_size=12",
                             "--set", "modern.betas=(0.9, 0.95)", "--set", "tuned.lr=1e-2",
                             "--set", "modern.tie_embeddings=True", "--set", "modern.min_lr=0"])
    tuned, modern = args.recipe_list
    assert tuned == replace(bench.TUNED, lr=1e-2)
    assert modern == replace(bench.MODERN, muon_lr=0.02, optimizer="adamw", batch_size=12,
                             betas=(0.9, 0.95), tie_embeddings=True, min_lr=0.0)
    assert isinstance(modern.min_lr, float)  # "0" read as the float field's 0.0


@pytest.mark.parametrize("setting, error", [
    ("modern.muon_lr", "RECIPE.FIELD=VALUE"),
    ("gpt.lr=1e-3", "unknown recipe 'gpt'"),
    ("modern.speed=2", "unknown field 'speed'"),
    ("modern.name=fast", "unknown field 'name'"),
    ("modern.muon_lr=fast", "muon_lr takes float or int"),
    ("modern.batch_size=2.5", "batch_size takes int"),
    ("modern.batch_size=True", "batch_size takes int"),
    ("modern.decay=step", "decay must be"),
    ("baseline.max_iters=None", "max_iters"),
    ("tuned.tie_embeddings=False", "tie_embeddings"),
])
def test_bad_settings_are_refused(setting: str, error: str, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--set", setting])
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
