"""Train chapter 7's chain-of-thought experiment and ship its results (not a test).

Two small GPTs from scratch on multi-step arithmetic (:mod:`course_lib.arithmetic`), one with
answer-only targets and one with every intermediate count written out, with
:data:`course_lib.arithmetic.COT_CONFIG`; the exact-match accuracy of each at every test k goes
to ``course_lib/data/chain_of_thought.json`` (provenance in ``course_lib/data/CHAIN_OF_THOUGHT.md``),
which the chapter plots. ``tests/test_arithmetic.py`` checks that the file's configuration is
the module's.

Run (about 5 minutes on one thread of a 2-core machine)::

    nice -n 10 .venv/bin/python scripts/train_chain_of_thought.py
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import arithmetic  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="override the steps (smoke runs)")
    parser.add_argument("--out", type=Path, default=arithmetic.RESULTS_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = arithmetic.COT_CONFIG if args.steps is None else replace(arithmetic.COT_CONFIG,
                                                                      steps=args.steps)
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    print("command:", command)
    start = time.perf_counter()
    results = arithmetic.run(config, progress=False)
    results["command"] = "nice -n 10 .venv/bin/python scripts/train_chain_of_thought.py"
    results["torch"] = torch.__version__
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    for name, by_k in results["accuracy"].items():
        print(f"{name:>17}: " + "  ".join(f"k={k} {a:.3f}" for k, a in by_k.items()))
    print(f"wrote {args.out}; total {time.perf_counter() - start:.1f} s")
    return results


if __name__ == "__main__":
    main()
