"""Train chapter 8's chain-of-thought experiment and ship its results (not a test).

Two small GPTs from scratch on multi-step arithmetic (:mod:`course_lib.arithmetic`), one with
answer-only targets and one with every intermediate count written out, with
:data:`course_lib.arithmetic.COT_CONFIGS` (``short``: up to 4 steps in training; ``long``: up to 8);
the exact-match accuracy of each at every test k goes to
``course_lib/data/chain_of_thought_<config>.json.xz`` (provenance in
``course_lib/data/CHAIN_OF_THOUGHT.md``), which the chapter plots. ``tests/test_arithmetic.py``
checks that each file's configuration is the module's.

Run (about 5 and 8 minutes on one thread of a busy 2-core machine)::

    nice -n 10 .venv/bin/python scripts/train_chain_of_thought.py --config short
    nice -n 10 .venv/bin/python scripts/train_chain_of_thought.py --config long
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import arithmetic, finetune


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="override the steps (smoke runs)")
    parser.add_argument("--config", choices=sorted(arithmetic.COT_CONFIGS), default="short",
                        help="which experiment (default short: up to 4 steps in training)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: course_lib/data/chain_of_thought_<config>.json.xz")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = arithmetic.COT_CONFIGS[args.config]
    if args.steps is not None:
        config = replace(config, steps=args.steps)
    out = args.out or arithmetic.results_path(args.config)
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    print("command:", command)
    start = time.perf_counter()
    results = arithmetic.run(config, progress=False)
    results["command"] = ("nice -n 10 .venv/bin/python scripts/train_chain_of_thought.py "
                          f"--config {args.config}")
    results["torch"] = torch.__version__
    finetune.save_json_xz(results, out)
    for name, by_k in results["accuracy"].items():
        print(f"{name:>17}: " + "  ".join(f"k={k} {a:.3f}" for k, a in by_k.items()))
    print(f"wrote {out}; total {time.perf_counter() - start:.1f} s")
    return results


if __name__ == "__main__":
    main()
