"""Chapter 7's ladder: chapter 4's GPT block changed into Llama's one piece at a time; ships the
runs.

Trains character-level decoders (``course_lib.llama.LlamaForCausalLM``, 2 layers, width 64, 4
heads, context 128) on the shipped Shakespeare (``course_lib.sweep.char_data``), every rung with
the same steps, batches, learning-rate schedule and seeds:

  gpt       learned positions, LayerNorm, GELU MLP (width 4d), 4 key/value heads (chapter 4's block)
  +rope     rotary positions instead of the learned table
  +rmsnorm  RMSNorm instead of LayerNorm
  +swiglu   SwiGLU MLP of width 171 (about 2/3 of 4d: the same parameters)
  +gqa      2 key/value heads for 4 query heads, the MLP widened to 192 to keep the parameters

plus ``sinusoidal`` (the +rope rung with chapter 2's sinusoids instead) for the length
generalisation of section 1, and two MoE runs (the +gqa rung with 4 SwiGLU experts of width 96,
top-2, with and without the load-balancing loss) for section 6. Each run records its
non-embedding parameters, wall time, its validation curve, its validation loss at contexts 128,
256 and 512 (and, for RoPE, with position interpolation), and (MoE) the experts' usage.

Writes ``course_lib/data/modern_decoder_runs.json.xz`` (provenance in
``course_lib/data/MODERN_DECODER_RUNS.md``). Run (about 15 minutes on one thread)::

    nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py

The long ladder (``--long``): the five rungs and ``sinusoidal`` again for ``LONG_STEPS`` steps (the
same schedule stretched), each also recording the loss at every position of 512-character
windows; ``--shard I N`` makes every N-th of those runs (several processes), ``--merge`` puts the
shards into the file under ``"long"`` (about 2 minutes a run on one quiet thread)::

    for i in 0 1; do nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py --long \
        --shard $i 2 --out long$i.json.xz & done; wait
    .venv/bin/python scripts/modern_decoder_runs.py --merge long0.json.xz long1.json.xz

The equal-time ladder (chapter 7, section 8 and exercise 8): ``--cost FILE`` measures the CPU
time of one training step of each configuration (``time.process_time``, one thread,
``COST_ROUNDS`` rounds of ``COST_STEPS`` steps of every configuration in turn, the median of the
rounds); ``--equal-time FILE --budget S`` then gives every run ``round(S / cost)`` steps of its
configuration, so that at the measured costs every run trains for the same time, with the
warm-up and the cosine decay laid over its own steps and the validation loss after every twelfth
of them; ``--runs NAME:SEED ...`` makes some of the runs (several processes or machines), and
``--merge-equal-time`` puts the outputs and the cost file into the file under
``"equal_time"``::

    nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py --cost cost.json
    nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py --equal-time cost.json \
        --budget 120 --out equal.json.xz
    .venv/bin/python scripts/modern_decoder_runs.py --equal-time cost.json \
        --merge-equal-time equal.json.xz
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import llama, moe
from course_lib.corpus import random_windows
from course_lib.finetune import save_json_xz
from course_lib.sweep import char_data

CONTEXT = 128
BATCH = 16
STEPS = 600
LR = 3e-3
WARMUP = 50
SEEDS = (0, 1, 2)
EVAL_CONTEXTS = (128, 256, 512)
EVAL_TOKENS = 32768  # validation characters per context length
LONG_STEPS = 2400  # the ladder's long runs (--long): four times the steps, to near convergence
LONG_EVAL_EVERY = 200
POSITION_WINDOWS = 256  # validation windows of 512 characters for the loss per position
AUX_COEF = 0.01
COST_ROUNDS = 5  # --cost: rounds of COST_STEPS steps of every configuration, interleaved
COST_STEPS = 40
EQUAL_BUDGET = 120.0  # --equal-time: CPU seconds of training steps per run (the cost's machine)
EQUAL_POINTS = 12  # --equal-time: the validation loss after every twelfth of a run's steps
COMMAND = "nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py"
LONG_COMMAND = ("for i in 0 1; do nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py "
                "--long "
                "--shard $i 2 --out long$i.json.xz & done; wait; .venv/bin/python "
                "scripts/modern_decoder_runs.py --merge long0.json.xz long1.json.xz")
EQUAL_COMMAND = ("nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py --cost cost.json; "
                 "nice -n 10 .venv/bin/python scripts/modern_decoder_runs.py "
                 "--equal-time cost.json --budget 120 --out equal.json.xz; "
                 ".venv/bin/python scripts/modern_decoder_runs.py "
                 "--equal-time cost.json --merge-equal-time equal.json.xz")

BASE = llama.LlamaConfig(vocab_size=83, hidden_size=64, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=max(EVAL_CONTEXTS), tie_word_embeddings=True,
                         position="learned", norm="layer", mlp="gelu")
RUNGS = {
    "gpt": BASE,
    "+rope": replace(BASE, position="rope"),
    "+rmsnorm": replace(BASE, position="rope", norm="rms"),
    "+swiglu": replace(BASE, position="rope", norm="rms", mlp="swiglu", intermediate_size=171),
    "+gqa": replace(BASE, position="rope", norm="rms", mlp="swiglu", intermediate_size=192,
                    num_key_value_heads=2),
}
EXTRA = {
    "sinusoidal": replace(RUNGS["+rope"], position="sinusoidal"),
    "moe": replace(RUNGS["+gqa"], num_local_experts=4, num_experts_per_tok=2,
                   intermediate_size=96),
    "moe-no-balance": replace(RUNGS["+gqa"], num_local_experts=4, num_experts_per_tok=2,
                              intermediate_size=96),
}
EQUAL_JOBS = ([(name, seed) for name in RUNGS for seed in SEEDS]
              + [("sinusoidal", seed) for seed in SEEDS[:2]])  # the long and equal-time ladders


def non_embedding_params(model: llama.LlamaForCausalLM) -> int:
    """Parameters of the blocks and the final norm (token and position tables excluded)."""
    return sum(p.numel() for n, p in model.named_parameters()
               if not n.startswith(("model.embed_tokens", "model.embed_positions", "lm_head")))


def lr_at(step: int, steps: int = STEPS) -> float:
    """Linear warm-up over WARMUP steps, then a cosine decay to LR / 10 at the last of ``steps``."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - 1 - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model: llama.LlamaForCausalLM, val: torch.Tensor, context: int,
             scale: float = 1.0) -> float:
    """Mean loss (nats per character) over every position of fixed validation windows."""
    if scale != 1.0:
        model = _rescaled(model, scale)
    n = EVAL_TOKENS // context
    offsets = torch.linspace(0, val.numel() - context - 2, n).long()
    window = val[offsets[:, None] + torch.arange(context + 1)].long()
    model.eval()
    total, count = 0.0, 0
    for chunk in window.split(max(1, 2048 // context)):
        logits = model(chunk[:, :-1])
        total += float(F.cross_entropy(logits.flatten(0, 1).double(), chunk[:, 1:].flatten(),
                                       reduction="sum"))
        count += chunk[:, 1:].numel()
    model.train()
    return total / count


@torch.no_grad()
def loss_by_position(model: llama.LlamaForCausalLM, val: torch.Tensor,
                     context: int = max(EVAL_CONTEXTS),
                     windows: int = POSITION_WINDOWS) -> list[float]:
    """Mean loss (nats per character) at each position 0..context-1 of evenly spaced validation
    windows: the loss past the trained context, position by position."""
    offsets = torch.linspace(0, val.numel() - context - 2, windows).long()
    window = val[offsets[:, None] + torch.arange(context + 1)].long()
    model.eval()
    total = torch.zeros(context, dtype=torch.float64)
    for chunk in window.split(max(1, 2048 // context)):
        logits = model(chunk[:, :-1])
        total += F.cross_entropy(logits.transpose(1, 2).double(), chunk[:, 1:],
                                 reduction="none").sum(0)
    model.train()
    return [round(float(v), 5) for v in total / windows]


def _rescaled(model: llama.LlamaForCausalLM, scale: float) -> llama.LlamaForCausalLM:
    other = llama.LlamaForCausalLM(replace(model.config, rope_scale=scale))
    other.load_state_dict(model.state_dict())
    return other


def train(name: str, config: llama.LlamaConfig, seed: int, train_ids: torch.Tensor,
          val: torch.Tensor, steps: int, eval_every: int = 100,
          by_position: bool = False, eval_points: int | None = None) -> dict:
    """One run: ``steps`` steps with the warm-up and a cosine decay laid over them; its row
    records, besides the losses, its wall time and the CPU time of its training steps alone
    (``train_cpu_seconds``, ``time.process_time``, evaluations excluded). The validation loss
    is taken every ``eval_every`` steps and at the last, or, with ``eval_points``, after each
    ``eval_points``-th of the steps (the same fractions of the run for every rung)."""
    if eval_points:
        at = {round(steps * k / eval_points) for k in range(1, eval_points + 1)}
    else:
        at = {s for s in range(eval_every, steps + 1, eval_every)} | {steps}
    torch.manual_seed(seed)
    model = llama.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    batches = torch.Generator().manual_seed(1000 + seed)  # the same batches for every rung
    aux = AUX_COEF if name == "moe" else 0.0
    curve = []
    start = time.perf_counter()
    cpu = 0.0  # the CPU time of the training steps, evaluations excluded
    for step in range(steps):
        tick = time.process_time()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        x, y = random_windows(train_ids, CONTEXT, BATCH, generator=batches)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        if config.num_local_experts:
            loss = loss + aux * sum(moe.load_balancing_loss(r, config.num_experts_per_tok)
                                    for r in model.router_logits())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        cpu += time.process_time() - tick
        if step + 1 in at:
            curve.append([step + 1, evaluate(model, val, CONTEXT)])
    seconds = time.perf_counter() - start
    row = {"name": name, "seed": seed, "config": asdict(config), "steps": steps,
           "seconds": seconds, "train_cpu_seconds": cpu,
           "non_embedding_params": non_embedding_params(model),
           "params": llama.num_params(model), "curve": curve,
           "val_loss": {str(c): evaluate(model, val, c) for c in EVAL_CONTEXTS}}
    if by_position:
        row["loss_by_position"] = loss_by_position(model, val)
    if config.position == "rope":
        row["val_loss_interpolated"] = {str(c): evaluate(model, val, c, scale=c / CONTEXT)
                                        for c in EVAL_CONTEXTS[1:]}
    if config.num_local_experts:
        model.eval()
        with torch.no_grad():
            model(val[: 64 * CONTEXT].long().view(64, CONTEXT))
        row["expert_usage"] = [
            moe.expert_counts(r.topk(config.num_experts_per_tok, -1).indices,
                              config.num_local_experts).tolist() for r in model.router_logits()]
        row["active_params"] = sum(moe.active_params(layer.mlp) for layer in model.model.layers)
        row["moe_params"] = sum(llama.num_params(layer.mlp) for layer in model.model.layers)
    print(f"{name:>15} seed {seed}: {row['non_embedding_params']:,} non-embedding, "
          f"val {row['val_loss']['128']:.4f}, {seconds:.0f} s", flush=True)
    return row


def measure_cost(train_ids: torch.Tensor, rounds: int = COST_ROUNDS,
                 steps: int = COST_STEPS) -> dict:
    """The CPU time of one training step (``time.process_time``, one thread) of each ladder
    configuration: ``rounds`` rounds in which every configuration runs ``steps`` steps in turn
    (the order rotated each round, so a change of the machine's load falls on all of them), after
    5 steps of warm-up each; the cost of a configuration is its median over the rounds."""
    configs = {name: ({**RUNGS, **EXTRA})[name] for name in dict.fromkeys(n for n, _ in EQUAL_JOBS)}
    state = {}
    for name, config in configs.items():
        torch.manual_seed(0)
        model = llama.LlamaForCausalLM(config)
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
        state[name] = (model, opt, torch.Generator().manual_seed(1000))

    def run(name: str, n: int) -> float:
        model, opt, batches = state[name]
        start = time.process_time()
        for _ in range(n):
            x, y = random_windows(train_ids, CONTEXT, BATCH, generator=batches)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        return (time.process_time() - start) / n

    for name in configs:
        run(name, 5)
    names = list(configs)
    per_round = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            per_round[name].append(run(name, steps))
    cost = {name: sorted(v)[len(v) // 2] for name, v in per_round.items()}
    return {"cost": cost, "rounds": per_round, "steps_per_round": steps,
            "torch": torch.__version__, "machine": _machine(), "load": list(os.getloadavg())}


def _machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def equal_steps(cost: dict[str, float], budget: float = EQUAL_BUDGET) -> dict[str, int]:
    """Each configuration's step count: the budget (CPU seconds) over its measured step cost."""
    return {name: int(round(budget / c)) for name, c in cost.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="fewer steps (smoke runs)")
    parser.add_argument("--out", type=Path, default=llama.RUNS_PATH)
    parser.add_argument("--only", nargs="+", default=None,
                        help="rerun these runs (names) and replace them in the existing file")
    parser.add_argument("--long", action="store_true",
                        help=f"the long ladder: every rung and sinusoidal for {LONG_STEPS} steps")
    parser.add_argument("--shard", type=int, nargs=2, default=(0, 1), metavar=("I", "N"),
                        help="--long: make only the I-th of every N runs (to use two processes)")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="put the runs of these --long outputs into --out under 'long'")
    parser.add_argument("--cost", type=Path, default=None,
                        help="measure each configuration's CPU time per step, write it here")
    parser.add_argument("--equal-time", type=Path, default=None, metavar="COST",
                        help="the equal-time ladder: every run gets --budget CPU seconds of steps "
                             "at the step costs of this --cost file")
    parser.add_argument("--budget", type=float, default=EQUAL_BUDGET)
    parser.add_argument("--runs", nargs="+", default=None, metavar="NAME:SEED",
                        help="--equal-time: make only these runs (default: all)")
    parser.add_argument("--merge-equal-time", type=Path, nargs="+", default=None,
                        help="put the runs of these --equal-time outputs into --out under "
                             "'equal_time' (with the --cost file given by --equal-time)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.merge:
        return merge_long(args.merge, args.out)
    if args.merge_equal_time:
        return merge_equal_time(args.merge_equal_time, args.equal_time, args.out)
    train_ids, val, vocab = char_data()
    assert vocab == BASE.vocab_size
    start = time.perf_counter()
    if args.cost:
        cost = measure_cost(train_ids, steps=COST_STEPS if args.steps == STEPS else args.steps)
        cost["command"] = " ".join(["python3", "scripts/modern_decoder_runs.py", *sys.argv[1:]])
        args.cost.write_text(json.dumps(cost, indent=1) + "\n")
        for name, c in cost["cost"].items():
            print(f"{name:>12}: {1000 * c:.1f} ms a step, {equal_steps(cost['cost'])[name]} steps "
                  f"in {EQUAL_BUDGET:.0f} s")
        return cost
    if args.equal_time:
        cost = json.loads(args.equal_time.read_text())
        steps = equal_steps(cost["cost"], args.budget)
        if args.steps != STEPS:  # smoke runs: the same proportions, fewer steps
            top = max(steps.values())
            steps = {n: max(2, round(args.steps * s / top)) for n, s in steps.items()}
        jobs = EQUAL_JOBS if args.runs is None else [
            (run.rsplit(":", 1)[0], int(run.rsplit(":", 1)[1])) for run in args.runs]
        configs = {**RUNGS, **EXTRA}
        part = {"budget": args.budget, "steps": steps, "runs": [], "torch": torch.__version__,
                "machine": _machine(), "load_start": list(os.getloadavg())}
        for name, seed in jobs:  # saved after every run: a run cut short loses only itself
            part["runs"].append(train(name, configs[name], seed, train_ids, val, steps[name],
                                      by_position=True, eval_points=EQUAL_POINTS))
            part["seconds"] = time.perf_counter() - start
            part["load_end"] = list(os.getloadavg())
            partial = args.out.with_name(args.out.name + ".partial")
            save_json_xz(part, partial)
            os.replace(partial, args.out)  # a run killed while saving leaves the last file whole
        print(f"wrote {args.out}; {time.perf_counter() - start:.0f} s")
        return part
    if args.long:
        steps = LONG_STEPS if args.steps == STEPS else args.steps
        jobs = [(name, cfg, seed) for name, cfg in RUNGS.items() for seed in SEEDS]
        jobs += [("sinusoidal", EXTRA["sinusoidal"], seed) for seed in SEEDS[:2]]
        i, n = args.shard
        runs = [train(name, cfg, seed, train_ids, val, steps, eval_every=LONG_EVAL_EVERY,
                      by_position=True) for name, cfg, seed in jobs[i::n]]
        part = {"steps": steps, "shard": [i, n], "runs": runs,
                "seconds": time.perf_counter() - start, "torch": torch.__version__}
        save_json_xz(part, args.out)
        print(f"wrote {args.out}; {part['seconds']:.0f} s")
        return part
    if args.only:
        results = llama.load_runs(args.out)
        configs = {**RUNGS, **EXTRA}
        redone = {(r["name"], r["seed"]): train(r["name"], configs[r["name"]], r["seed"],
                                                train_ids, val, args.steps)
                  for r in results["runs"] if r["name"] in args.only}
        results["runs"] = [redone.get((r["name"], r["seed"]), r) for r in results["runs"]]
        results["rerun"] = {"names": args.only, "seconds": time.perf_counter() - start}
        save_json_xz(results, args.out)
        print(f"replaced {len(redone)} runs in {args.out}")
        return results
    runs = [train(name, cfg, seed, train_ids, val, args.steps)
            for name, cfg in RUNGS.items() for seed in SEEDS]
    runs += [train("sinusoidal", EXTRA["sinusoidal"], seed, train_ids, val, args.steps)
             for seed in SEEDS[:2]]
    runs += [train(name, EXTRA[name], 0, train_ids, val, args.steps)
             for name in ("moe", "moe-no-balance")]
    results = {"command": COMMAND, "torch": torch.__version__, "context": CONTEXT,
               "batch": BATCH, "lr": LR, "warmup": WARMUP, "seeds": list(SEEDS),
               "aux_coef": AUX_COEF, "rungs": list(RUNGS), "runs": runs,
               "total_seconds": time.perf_counter() - start}
    save_json_xz(results, args.out)
    print(f"wrote {args.out}; total {results['total_seconds']:.0f} s")
    return results


def merge_long(parts: list[Path], out: Path) -> dict:
    """The shards of ``--long``, in the order of the jobs, under ``results["long"]``."""
    shards = [llama.load_runs(p) for p in parts]
    order = {(name, seed): k for k, (name, seed) in enumerate(
        [(name, seed) for name in RUNGS for seed in SEEDS]
        + [("sinusoidal", seed) for seed in SEEDS[:2]])}
    runs = sorted((r for s in shards for r in s["runs"]), key=lambda r: order[r["name"], r["seed"]])
    assert len({s["steps"] for s in shards}) == 1
    results = llama.load_runs(out)
    results["long"] = {"command": LONG_COMMAND, "steps": shards[0]["steps"],
                       "eval_every": LONG_EVAL_EVERY, "position_windows": POSITION_WINDOWS,
                       "torch": shards[0]["torch"], "runs": runs,
                       "shard_seconds": [s["seconds"] for s in shards]}
    save_json_xz(results, out)
    print(f"merged {len(runs)} long runs into {out}")
    return results


def merge_equal_time(parts: list[Path], cost_path: Path, out: Path) -> dict:
    """The runs of ``--equal-time`` outputs, in the order of EQUAL_JOBS, under
    ``results["equal_time"]``, with the step costs that set their step counts. A run made in
    more than one output is taken from the first output that has it; each run records where it
    ran (``machine``, ``torch``: its output's)."""
    shards = [llama.load_runs(p) for p in parts]
    cost = json.loads(cost_path.read_text())
    assert len({s["budget"] for s in shards}) == 1
    budget = shards[0]["budget"]
    steps = equal_steps(cost["cost"], budget)
    chosen: dict[tuple[str, int], dict] = {}
    used: list[list[list]] = []
    for shard in shards:
        used.append([])
        for run in shard["runs"]:
            key = (run["name"], run["seed"])
            if key not in chosen:
                assert run["steps"] == steps[run["name"]], key
                chosen[key] = {**run, "machine": shard["machine"], "torch": shard["torch"]}
                used[-1].append(list(key))
    assert sorted(chosen, key=EQUAL_JOBS.index) == list(EQUAL_JOBS), "runs missing"
    results = llama.load_runs(out)
    results["equal_time"] = {
        "command": EQUAL_COMMAND, "budget": budget, "cost": cost, "steps": steps,
        "eval_points": EQUAL_POINTS, "position_windows": POSITION_WINDOWS,
        "runs": [chosen[job] for job in EQUAL_JOBS],
        "parts": [{**{k: v for k, v in s.items() if k != "runs"}, "file": p.name,
                   "made": [[r["name"], r["seed"]] for r in s["runs"]], "used": u}
                  for p, s, u in zip(parts, shards, used)]}
    save_json_xz(results, out)
    print(f"merged {len(chosen)} equal-time runs into {out}")
    return results


if __name__ == "__main__":
    main()
