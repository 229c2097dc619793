r"""A scaling sweep on the shipped Shakespeare: small GPTs trained at fixed compute budgets.

Taught in chapter 5 (scaling laws), sections on the sweep and on running it on several machines.
``bench/scaling_sweep.py`` runs :data:`SWEEP` and writes ``course_lib/data/scaling_sweep.csv.gz``,
which the chapter loads; the chapter re-runs one or two small points live with :func:`train_run`.

**The design** follows Hoffmann et al. (2022)'s IsoFLOP profiles: a few compute budgets
:math:`C` (:data:`BUDGETS`), and for each budget every model size :math:`N` (:data:`SIZES`) whose
token count :math:`D = C / (6 N)` gives a run of a sensible length, so each size is trained at
several token budgets and each budget sees several sizes. :math:`N` counts the non-embedding
parameters (Kaplan et al., 2020: the blocks and the final LayerNorm, not the token and position
tables). The learning rate shrinks with the width (:func:`learning_rate`); each run warms up
linearly and then follows a cosine to 10% of its peak over exactly its own number of steps, as
Hoffmann et al. found necessary (a cosine longer than the run overestimates the loss at the end).
One larger run (:data:`HELDOUT`) is kept out of every fit and predicted from the others.

**Several processes.** :func:`train_run` is the same function in one process and under
``torchrun``: when ``torch.distributed`` is initialised, it wraps the model in
``DistributedDataParallel``, and each of the ``W`` ranks takes its ``B / W`` rows of the same
global batch (every rank draws the same offsets from the same seeded generator), so the averaged
gradients, the updates and the losses are those of the single-process run up to floating-point
summation order.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from course_lib import counting
from course_lib.checks import check_ids
from course_lib.corpus import char_vocabulary, load_shakespeare
from course_lib.gpt import GPT, GPTConfig

#: The shipped results, gzip-compressed (the package ships ``data/*.gz``).
SWEEP_CSV = Path(__file__).resolve().parent / "data" / "scaling_sweep.csv.gz"
BLOCK_SIZE = 64  # context length of every run
BATCH_SIZE = 16  # global batch, in windows of BLOCK_SIZE characters (1,024 tokens per step)
TOKENS_PER_STEP = BLOCK_SIZE * BATCH_SIZE
EVAL_WINDOWS = 256  # fixed validation windows (16,384 characters of the four held-out plays)
#: Compute budgets of the IsoFLOP profiles, in FLOPs (C = 6 N D): half a decade apart.
BUDGETS: tuple[float, ...] = (1e10, 10**10.5, 1e11, 10**11.5, 1e12)
#: The model shapes of the fit, (n_embd, n_layer, n_head): non-embedding N from 0.9k to 100k.
SIZES: tuple[tuple[int, int, int], ...] = ((8, 1, 2), (12, 1, 2), (16, 1, 2), (16, 2, 2),
                                           (24, 2, 4), (32, 2, 4), (48, 2, 4), (64, 2, 4))
MIN_STEPS, MAX_STEPS = 60, 20000  # a run shorter or longer than this is left out of the grid


@dataclass(frozen=True)
class RunConfig:
    """One run of the sweep: a model shape and how many tokens it trains on."""

    name: str  # e.g. "d16-L2-C1e11"
    n_embd: int  # width d
    n_layer: int  # blocks L
    n_head: int  # heads per block
    steps: int  # optimiser steps of BATCH_SIZE x BLOCK_SIZE tokens
    lr: float  # peak learning rate (AdamW)
    warmup: int  # linear warm-up steps, then a cosine to 10% over the remaining steps
    budget: float  # the compute budget C this run belongs to (FLOPs, 6 N D)
    heldout: bool = False  # kept out of the fits (the extrapolation test)
    seed: int = 0

    @property
    def tokens(self) -> int:
        """``D``, the training tokens: steps x batch x context."""
        return self.steps * TOKENS_PER_STEP


def non_embedding_params(n_embd: int, n_layer: int) -> int:
    r"""Kaplan et al.'s :math:`N` of :class:`course_lib.gpt.GPT`: its blocks and final LayerNorm.

    .. math:: N = L\,(12 d^2 + 13 d) + 2 d

    Example:
        >>> non_embedding_params(64, 2)
        100096
    """
    return counting.gpt_param_parts(n_embd, n_layer, vocab_size=1, n_ctx=0)["non_embedding"]


def learning_rate(n_embd: int) -> float:
    r"""The peak learning rate of a width-``d`` model: :math:`0.02\,(32 / d)^{1/3}`.

    Wider models need smaller steps (Kaplan et al., 2020, fit a learning rate falling with
    :math:`\log N`; the maximal-update parametrisation scales it as :math:`1/d` for the hidden
    matrices). The cube root was chosen by hand from a pilot on three widths (8, 16 and 64;
    ``course_lib/data/SCALING_SWEEP.md``), where the best of a factor-2 grid was within 1.3x of it.

    Example:
        >>> learning_rate(32)
        0.02
    """
    lr: float = 0.02 * (32 / n_embd) ** (1 / 3)
    return lr


def make_run(n_embd: int, n_layer: int, n_head: int, budget: float, heldout: bool = False,
             seed: int = 0) -> RunConfig:
    """The run of a shape at compute budget ``budget``: ``D = C / (6 N)`` rounded to whole steps."""
    n = non_embedding_params(n_embd, n_layer)
    steps = max(1, round(budget / (6 * n) / TOKENS_PER_STEP))
    exponent = math.log10(budget)
    return RunConfig(name=f"d{n_embd}-L{n_layer}-C{exponent:.1f}", n_embd=n_embd, n_layer=n_layer,
                     n_head=n_head, steps=steps, lr=round(learning_rate(n_embd), 6),
                     warmup=min(100, max(1, steps // 10)), budget=budget, heldout=heldout,
                     seed=seed)


def sweep_configs() -> list[RunConfig]:
    """Every run: each size at each budget whose step count is in range, then the held-out run."""
    runs = []
    for budget in BUDGETS:
        for d, L, h in SIZES:
            run = make_run(d, L, h, budget)
            if MIN_STEPS <= run.steps <= MAX_STEPS:
                runs.append(run)
    return runs + [HELDOUT]


#: The held-out run: a model twice as large as the largest of the fit, at 3x its largest budget.
HELDOUT = make_run(96, 2, 4, 10**12.5, heldout=True)
SWEEP: tuple[RunConfig, ...] = tuple(sweep_configs())


@cache
def char_data() -> tuple[torch.Tensor, torch.Tensor, int]:
    """The training and validation splits as character ids ``(N,)`` uint8, and the vocabulary size.

    Example:
        >>> train, val, vocab = char_data()
        >>> vocab, val.dtype
        (83, torch.uint8)
    """
    train_text, val_text = load_shakespeare("train"), load_shakespeare("val")
    vocabulary = char_vocabulary(train_text)
    # the corpus stays on the CPU (torch.frombuffer's device): batches are moved when drawn
    table = torch.full((256,), 255, dtype=torch.uint8, device="cpu")
    table[torch.tensor([ord(c) for c in vocabulary], device="cpu")] = torch.arange(
        len(vocabulary), dtype=torch.uint8, device="cpu")

    def encode(text: str) -> torch.Tensor:
        ids = table[torch.frombuffer(bytearray(text.encode("ascii")), dtype=torch.uint8).long()]
        if (ids == 255).any():
            raise ValueError("a character of the validation split is not in the vocabulary")
        return ids

    return encode(train_text), encode(val_text), len(vocabulary)


def model_for(run: RunConfig, vocab_size: int) -> GPT:
    """The GPT of a run (GPT-2's architecture, learned positions, tied embeddings)."""
    return GPT(GPTConfig(vocab_size=vocab_size, block_size=BLOCK_SIZE, n_layer=run.n_layer,
                         n_head=run.n_head, n_embd=run.n_embd))


def lr_at(step: int, run: RunConfig) -> float:
    """Linear warm-up to ``run.lr`` over ``run.warmup`` steps, then a cosine to 10% at the end.

    Example:
        >>> run = make_run(16, 2, 2, 1e11)
        >>> lr_at(run.steps - 1, run) / run.lr
        0.1
    """
    if step < run.warmup:
        return run.lr * (step + 1) / run.warmup
    span = max(1, run.steps - 1 - run.warmup)
    progress = min(1.0, (step - run.warmup) / span)
    return run.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_sum(t: torch.Tensor) -> torch.Tensor:
    if _world()[1] > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


@torch.no_grad()
def evaluate(model: torch.nn.Module, val: torch.Tensor, n_windows: int = EVAL_WINDOWS,
             device: torch.device | str = "cpu") -> float:
    """Mean next-character loss (nats) on ``n_windows`` fixed, evenly spaced validation windows.

    Under ``torch.distributed`` each rank evaluates its share and the sums are all-reduced.
    """
    vocab = model.config.vocab_size if isinstance(model, GPT) else None
    check_ids("val", val, vocab, ndim=1, shape="(N,)")
    if val.numel() < BLOCK_SIZE + 2:
        raise ValueError(f"val must hold at least BLOCK_SIZE + 2 = {BLOCK_SIZE + 2} ids, got "
                         f"{val.numel()}")
    rank, world = _world()
    offsets = torch.linspace(0, val.numel() - BLOCK_SIZE - 2, n_windows, device=val.device).long()
    index = offsets[rank::world, None] + torch.arange(BLOCK_SIZE + 1, device=val.device)
    window = val[index].long().to(device)
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for chunk in window.split(64):
        logits = model(chunk[:, :-1])
        total[0] += F.cross_entropy(logits.flatten(0, 1).double(), chunk[:, 1:].flatten(),
                                    reduction="sum")
        total[1] += chunk[:, 1:].numel()
    model.train(was_training)
    total = _all_sum(total)
    return float(total[0] / total[1])


def train_run(run: RunConfig, device: torch.device | str = "cpu", steps: int | None = None,
              eval_windows: int = EVAL_WINDOWS) -> dict[str, Any]:
    """Train one run of the sweep and return its row: sizes, tokens, FLOPs, losses, seconds.

    Args:
        run: the configuration.
        device: where to train (``course_lib.get_device()``; under ``torchrun`` with NCCL, each
            rank's own GPU).
        steps: stop after this many steps instead of ``run.steps`` (the schedule keeps the run's
            length; for tests and the DDP check). The row's tokens and FLOPs are those trained.
        eval_windows: validation windows of the final evaluation.

    Returns:
        A dict: the configuration's fields, ``params_total``, ``params_nonembedding``,
        ``tokens``, ``flops`` (``6 N D``), ``val_loss``, ``train_loss`` (mean of the last 10%
        of steps), ``losses`` (every step's global training loss), ``seconds``, ``world_size``.
    """
    rank, world = _world()
    if BATCH_SIZE % world != 0:
        raise ValueError(f"the global batch of {BATCH_SIZE} windows does not split over {world} "
                         "processes")
    train, val, vocab = char_data()
    torch.manual_seed(run.seed)  # the same initial weights on every rank
    with torch.device("cpu"):  # seeded initialisation on the CPU: the same weights on every device
        model = model_for(run, vocab)
    model = model.to(device)
    n_total = sum(p.numel() for p in model.parameters())
    n_embed = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    net: torch.nn.Module = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model, device_ids=None if str(device) == "cpu" else [device])
    opt = torch.optim.AdamW(model.parameters(), lr=run.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(run.seed)
    local = BATCH_SIZE // world
    n_steps = run.steps if steps is None else min(steps, run.steps)
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(n_steps):
        offsets = torch.randint(train.numel() - BLOCK_SIZE, (BATCH_SIZE,), generator=gen,
                                device=gen.device)
        mine = offsets[rank * local:(rank + 1) * local].to(train.device)
        window = train[mine[:, None] + torch.arange(BLOCK_SIZE + 1, device=train.device)]
        window = window.long().to(device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, run)
        logits = net(window[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP averages the gradients over the ranks here
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(_all_sum(loss.detach().clone()) / world))
    val_loss = evaluate(model, val, eval_windows, device)
    seconds = time.perf_counter() - start
    tokens = n_steps * TOKENS_PER_STEP
    n = n_total - n_embed
    tail = losses[-max(1, n_steps // 10):]
    return {**asdict(run), "tokens": tokens, "params_total": n_total, "params_nonembedding": n,
            "flops": 6.0 * n * tokens, "val_loss": val_loss, "train_loss": sum(tail) / len(tail),
            "losses": losses, "seconds": seconds, "world_size": world}


#: The columns of the shipped CSV, in order.
COLUMNS: tuple[str, ...] = ("name", "n_embd", "n_layer", "n_head", "steps", "lr", "warmup",
                            "budget", "heldout", "seed", "tokens", "params_total",
                            "params_nonembedding", "flops", "val_loss", "train_loss", "seconds",
                            "world_size")
#: The columns that describe a run's configuration (a test checks them against :data:`SWEEP`).
CONFIG_COLUMNS: tuple[str, ...] = ("name", "n_embd", "n_layer", "n_head", "steps", "lr",
                                   "warmup", "budget", "heldout", "seed")


def _open_text(path: Path | str, mode: str) -> IO[str]:
    """A text file, gzip-compressed when the name ends in ``.gz`` (reproducible: no timestamp)."""
    if str(path).endswith(".gz"):
        raw = gzip.GzipFile(path, mode + "b", mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


def write_csv(rows: list[dict[str, Any]], path: Path | str = SWEEP_CSV) -> None:
    """Write the sweep's rows (the dicts of :func:`train_run`) with :data:`COLUMNS`."""
    with _open_text(path, "w") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{row[k]:.6g}" if isinstance(row[k], float) and k != "lr"
                                 else row[k]) for k in COLUMNS})


def read_csv(path: Path | str = SWEEP_CSV) -> list[dict[str, Any]]:
    """The sweep's rows with numbers parsed (ints, floats, and ``heldout`` as a bool).

    Example:
        >>> rows = read_csv()
        >>> len(rows) == len(SWEEP)
        True
    """
    ints = {"n_embd", "n_layer", "n_head", "steps", "warmup", "seed", "tokens", "params_total",
            "params_nonembedding", "world_size"}
    rows = []
    with _open_text(path, "r") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                if k == "name":
                    row[k] = v
                elif k == "heldout":
                    row[k] = v == "True"
                elif k in ints:
                    row[k] = int(v)
                else:
                    row[k] = float(v)
            rows.append(row)
    return rows


def init_distributed() -> torch.device:
    """Join the ``torchrun`` process group when launched by it; return this process's device.

    gloo on the CPU, NCCL with one GPU per rank (``LOCAL_RANK``). Without ``torchrun``'s
    environment (``WORLD_SIZE`` unset), nothing is initialised and the device is
    :func:`course_lib.get_device`'s.
    """
    from course_lib.utils import get_device
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return get_device()
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return torch.device("cuda", local)
    dist.init_process_group("gloo")
    return torch.device("cpu")
