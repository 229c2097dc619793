"""Chapter 8, section 2: full fine-tuning against LoRA at several ranks; ships the results.

Fine-tunes the shipped base model (``course_lib/data/base_gpt.pt.xz``) on the instruction task of
:mod:`course_lib.finetune` with :data:`course_lib.finetune.FINETUNE_CONFIG`: the same questions,
batches and steps for full fine-tuning and for LoRA at every rank, and measures trainable
parameters, the optimiser's state in bytes, time per step, task accuracy, and the base task's
validation loss after tuning (forgetting). Writes ``course_lib/data/fine_tuning_runs.json.xz``
(provenance in ``course_lib/data/FINE_TUNING_RUNS.md``); ``tests/test_finetune.py`` checks that the
file's configuration is the module's.

Run (about 4 to 8 minutes on one thread of a busy 2-core machine)::

    nice -n 10 .venv/bin/python scripts/finetune_runs.py

``--forgetting`` runs section 2's forgetting sweep instead (:data:`course_lib.finetune.
FORGETTING_CONFIG`: the methods at the same learning rates, and the pretraining text mixed in):
``--part k --parts n`` runs every n-th run from the k-th (two processes on two cores), each into
``course_lib/data/forgetting_runs/run<i>.json.xz`` as it ends, and ``--merge`` joins them into
``course_lib/data/fine_tuning_forgetting.json.xz``::

    nice -n 10 .venv/bin/python scripts/finetune_runs.py --forgetting --part 0 --parts 2 &
    nice -n 10 .venv/bin/python scripts/finetune_runs.py --forgetting --part 1 --parts 2
    .venv/bin/python scripts/finetune_runs.py --forgetting --merge
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import finetune


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="override the steps (smoke runs)")
    parser.add_argument("--out", type=Path, default=finetune.RUNS_PATH)
    parser.add_argument("--forgetting", action="store_true", help="the forgetting sweep")
    parser.add_argument("--part", type=int, default=0)
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--merge", action="store_true", help="join the sweep's part files")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.forgetting:
        return forgetting(args)
    config = finetune.FINETUNE_CONFIG if args.steps is None else replace(
        finetune.FINETUNE_CONFIG, steps=args.steps)
    print("command:", " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    start = time.perf_counter()
    results = finetune.compare_methods(config)
    results["command"] = "nice -n 10 .venv/bin/python scripts/finetune_runs.py"
    results["torch"] = torch.__version__
    finetune.save_json_xz(results, args.out)
    print(f"before: accuracy {results['accuracy_before']:.3f}, base loss "
          f"{results['base_loss_before']:.4f}")
    for name, m in results["methods"].items():
        print(f"{name:>12}: {m['trainable']:>7,} trainable, Adam {m['adam_bytes']:>9,} bytes, "
              f"{m['ms_per_step']:.1f} ms/step, accuracy {m['accuracy']:.3f}, base loss "
              f"{m['base_loss']:.4f}")
    print(f"wrote {args.out}; total {time.perf_counter() - start:.1f} s")
    return results


def forgetting(args: argparse.Namespace) -> dict:
    """Each run of the part into a file of its own as it ends; ``--merge`` joins them."""
    out = finetune.FORGETTING_PATH
    config = finetune.FORGETTING_CONFIG
    run_path = out.parent / "forgetting_runs"
    if args.merge:
        runs = [finetune.load_json_xz(run_path / f"run{k}.json.xz", "--part k")
                for k in range(len(config.runs))]
        results = {"config": asdict(config), "finetune_config": asdict(finetune.FINETUNE_CONFIG),
                   "command": ("nice -n 10 .venv/bin/python scripts/finetune_runs.py "
                               "--forgetting --part k --parts n"),
                   "torch": torch.__version__, "runs": runs,
                   "seconds": sum(r["seconds"] for r in runs)}
        finetune.save_json_xz(results, out)
        print(f"wrote {out}: {len(runs)} runs, {results['seconds']:.0f} s in all")
        return results
    run_path.mkdir(exist_ok=True)
    base, vocabulary = finetune.load_base_model()
    for index in range(args.part, len(config.runs), args.parts):
        start = time.perf_counter()
        r = finetune.forgetting_run(base, vocabulary, config, finetune.FINETUNE_CONFIG, index)
        r["seconds"] = time.perf_counter() - start
        finetune.save_json_xz(r, run_path / f"run{index}.json.xz")
        print(f"{index}: {r['method']:>10} lr {r['lr']:.0e} mix {r['mix_windows']}: accuracy "
              f"{r['accuracy']:.3f}, base loss {r['base_loss']:.4f}, {r['seconds']:.0f} s",
              flush=True)
    return {}


if __name__ == "__main__":
    main()
