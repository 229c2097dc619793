"""Execute every chapter top to bottom in full mode and print how long each took.

Usage:  .venv/bin/python bench/chapter_times.py [--quick] [--solutions] [SLUG ...]

Runs the student releases in chapters/ (what the website executes) unless --solutions is given.
The budget is 120 s per chapter on the course's 2-core CPU machine. A benchmark, not a test: it
prints figures and exits 0 unless a notebook fails to run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import nbclient
import nbformat
import torch

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 120.0


def run(path: Path) -> tuple[float, int]:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = sum(1 for c in nb.cells for o in c.get("outputs", [])
                 if o.get("output_type") == "error")
    return seconds, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("slugs", nargs="*")
    parser.add_argument("--quick", action="store_true", help="COURSE_LIB_QUICK=1 (tests' mode)")
    parser.add_argument("--solutions", action="store_true", help="run solutions/ instead")
    args = parser.parse_args()
    if args.quick:
        os.environ["COURSE_LIB_QUICK"] = "1"
    else:
        os.environ.pop("COURSE_LIB_QUICK", None)
    folder = "solutions" if args.solutions else "chapters"
    paths = sorted(ROOT.glob(f"{folder}/*/*.ipynb"))
    if args.slugs:
        paths = [p for p in paths if p.parent.name in args.slugs]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"mode: {'quick' if args.quick else 'full'}, notebooks: {folder}/")
    print(f"{'chapter':<24}{'seconds':>10}{'budget':>10}{'cells raising':>16}")
    for path in paths:
        seconds, errors = run(path)
        verdict = "ok" if seconds <= BUDGET_S else "OVER"
        print(f"{path.parent.name:<24}{seconds:>10.1f}{verdict:>10}{errors:>16}")
    print("reproduce: .venv/bin/python bench/chapter_times.py" + (" --quick" if args.quick else "")
          + (" --solutions" if args.solutions else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
