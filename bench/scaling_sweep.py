"""Run chapter 5's scaling sweep and write ``course_lib/data/scaling_sweep.csv.gz``.

One process (the CPU or one GPU):

    nice -n 10 python bench/scaling_sweep.py

Several processes with DistributedDataParallel, unchanged (gloo on CPUs, NCCL on GPUs):

    torchrun --standalone --nproc_per_node 2 bench/scaling_sweep.py

Every run of :data:`course_lib.sweep.SWEEP` is trained in turn (data-parallel over the ranks when
there are several); rank 0 prints one line per run, writes the CSV, and prints the total time.
``--only NAME`` runs the named runs only, ``--out PATH`` writes elsewhere, ``--threads`` sets
``torch.set_num_threads`` (default 1: two people can share two cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib import sweep


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(sweep.SWEEP_CSV))
    parser.add_argument("--only", nargs="*", default=None, help="names of runs to train")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = sweep.init_distributed()
    rank, world = (torch.distributed.get_rank(), torch.distributed.get_world_size()) \
        if torch.distributed.is_initialized() else (0, 1)
    runs = [r for r in sweep.SWEEP if args.only is None or r.name in args.only]
    start = time.perf_counter()
    rows = []
    for i, run in enumerate(runs):
        row = sweep.train_run(run, device)
        rows.append(row)
        if rank == 0:
            print(f"[{i + 1}/{len(runs)}] {run.name}: N={row['params_nonembedding']} "
                  f"D={row['tokens']} C={row['flops']:.3g} val={row['val_loss']:.4f} "
                  f"{row['seconds']:.1f}s", flush=True)
            sweep.write_csv(rows, args.out)  # after every run: a partial sweep is kept
    if rank == 0:
        total = time.perf_counter() - start
        print(f"total {total:.0f} s ({total / 60:.1f} min) for {len(runs)} runs on {world} "
              f"process(es), {device}; wrote {args.out}")
        print("reproduce: nice -n 10 python bench/scaling_sweep.py "
              "(or torchrun --standalone --nproc_per_node 2 bench/scaling_sweep.py)")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
