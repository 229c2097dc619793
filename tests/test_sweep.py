"""Tests of course_lib.sweep and bench/scaling_sweep.py: the design, the shipped CSV against the
script's configurations, and the DistributedDataParallel run against the single-process one."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from course_lib import sweep
from course_lib.counting import count_parameters

pytestmark = pytest.mark.ch05

ROOT = Path(__file__).resolve().parents[1]


def test_the_design_spans_enough_sizes_and_budgets() -> None:
    fit = [r for r in sweep.SWEEP if not r.heldout]
    sizes = {(r.n_embd, r.n_layer) for r in fit}
    ns = [sweep.non_embedding_params(d, L) for d, L in sizes]
    assert len(sizes) >= 6 and math.log10(max(ns) / min(ns)) >= 1.5
    for size in sizes:  # every size at several token budgets
        assert sum((r.n_embd, r.n_layer) == size for r in fit) >= 2, size
    for budget in sweep.BUDGETS:  # every IsoFLOP profile has enough sizes for a parabola
        assert sum(r.budget == budget for r in fit) >= 4, budget
    held = [r for r in sweep.SWEEP if r.heldout]
    assert len(held) == 1
    assert sweep.non_embedding_params(held[0].n_embd, held[0].n_layer) > max(ns)


@pytest.mark.parametrize("run", [sweep.SWEEP[0], sweep.HELDOUT], ids=lambda r: r.name)
def test_non_embedding_params_and_flops_of_a_run(run: sweep.RunConfig) -> None:
    model = sweep.model_for(run, 83)
    embeddings = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    n = sweep.non_embedding_params(run.n_embd, run.n_layer)
    assert n == count_parameters(model) - embeddings
    assert 6 * n * run.tokens == pytest.approx(run.budget, rel=0.03)  # whole steps round D


def test_the_schedule_warms_up_then_decays_to_a_tenth() -> None:
    run = sweep.make_run(16, 2, 2, 1e11)
    lrs = [sweep.lr_at(s, run) for s in range(run.steps)]
    assert lrs[run.warmup - 1] == pytest.approx(run.lr)
    assert lrs[-1] == pytest.approx(0.1 * run.lr)
    assert all(a >= b for a, b in zip(lrs[run.warmup - 1:], lrs[run.warmup:]))


def test_the_shipped_csv_holds_exactly_the_scripts_configurations() -> None:
    rows = sweep.read_csv()
    assert len(rows) == len(sweep.SWEEP)
    for row, run in zip(rows, sweep.SWEEP):  # floats are written with 6 significant digits
        config = dataclasses.asdict(run)
        for key in sweep.CONFIG_COLUMNS:
            expected = config[key]
            if isinstance(expected, float):
                assert row[key] == pytest.approx(expected, rel=1e-5), (run.name, key)
            else:
                assert row[key] == expected, (run.name, key)
    for row, run in zip(rows, sweep.SWEEP):
        assert row["tokens"] == run.tokens
        assert row["params_nonembedding"] == sweep.non_embedding_params(run.n_embd, run.n_layer)
        assert row["flops"] == pytest.approx(6 * row["params_nonembedding"] * row["tokens"],
                                             rel=1e-5)
        assert 0.5 < row["val_loss"] < math.log(83) + 0.5 and row["seconds"] > 0


def test_the_char_data_round_trips_the_vocabulary() -> None:
    train, val, vocab = sweep.char_data()
    assert vocab == 83 and int(train.max()) < vocab and int(val.max()) < vocab
    assert train.numel() == 4343147 and val.numel() == 503268


def test_a_short_run_is_deterministic_and_learns() -> None:
    run = sweep.make_run(8, 1, 2, 1e10)
    a = sweep.train_run(run, steps=30, eval_windows=16)
    b = sweep.train_run(run, steps=30, eval_windows=16)
    assert a["losses"] == b["losses"] and a["val_loss"] == b["val_loss"]
    assert a["losses"][-1] < a["losses"][0] - 0.3
    assert a["tokens"] == 30 * sweep.TOKENS_PER_STEP


STEPS = 6


def _ddp_worker(rank: int, world: int, port: int, run: sweep.RunConfig, queue) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        row = sweep.train_run(run, steps=STEPS, eval_windows=16)
        if rank == 0:
            queue.put((row["losses"], row["val_loss"], row["world_size"]))
    finally:
        torch.distributed.destroy_process_group()


def test_two_gloo_processes_reproduce_the_single_process_losses() -> None:
    """The global batch of 16 windows split 8 + 8 over two ranks, gradients averaged by DDP: the
    same updates, so the same losses up to float32 summation order (tolerance 1e-5 relative)."""
    run = sweep.make_run(16, 1, 2, 1e10)
    single = sweep.train_run(run, steps=STEPS, eval_windows=16)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_ddp_worker, args=(2, port, run, queue), nprocs=2, join=True,
                       start_method="spawn")
    losses, val_loss, world = queue.get()
    assert world == 2
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(single["losses"]),
                               rtol=1e-5, atol=1e-6)
    assert val_loss == pytest.approx(single["val_loss"], rel=1e-5)


def test_the_script_runs_one_named_run(tmp_path: Path) -> None:
    out = tmp_path / "one.csv"
    name = sweep.SWEEP[5].name  # the shortest run: 64 steps
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "scaling_sweep.py"),
                             "--only", name, "--out", str(out)], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "total" in result.stdout and "reproduce" in result.stdout
    rows = sweep.read_csv(out)
    assert [r["name"] for r in rows] == [name]
