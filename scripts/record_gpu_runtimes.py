"""Record how long each chapter runs on a GPU, for the website's run-times page and course map.

Run on a machine with CUDA, from the repository root, after `make setup`:

    taskset -c 0,1 python scripts/record_gpu_runtimes.py                 # every chapter
    taskset -c 0,1 python scripts/record_gpu_runtimes.py 02-self-attention

(``taskset -c 0,1``: the kernel gets two CPU cores, as on Colab's standard runtimes, so a chapter's
CPU-side work takes about as long as a student's; runtimes.md says so.)

Each chapter's page notebook (``chapters/NN-slug/slug.ipynb``, the one the website executes) runs
in full mode with nbclient, as the book build runs it; its wall-clock time, the GPU's name, the
date and the notebook's SHA-256 go into ``_data/gpu_runtimes.json`` (the page flags a time recorded
for an earlier version of the notebook). Commit the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_data" / "gpu_runtimes.json"


def merge_run(data: dict[str, Any], slug: str, seconds: float, device: str, date: str,
              notebook_sha256: str) -> dict[str, Any]:
    """``data`` with chapter ``slug``'s run replaced (other chapters kept).

    >>> merge_run({"chapters": {}}, "01-a", 12.345, "GPU", "2026-01-01", "ab")["chapters"]
    {'01-a': {'seconds': 12.3, 'device': 'GPU', 'date': '2026-01-01', 'notebook_sha256': 'ab'}}
    """
    if not seconds > 0:
        raise ValueError(f"{slug}: a run time must be positive, got {seconds}")
    chapters = dict(data.get("chapters", {}))
    chapters[slug] = {"seconds": round(seconds, 1), "device": device, "date": date,
                      "notebook_sha256": notebook_sha256}
    return {**data, "chapters": dict(sorted(chapters.items()))}


def page_notebook(slug: str) -> Path:
    found = sorted((ROOT / "chapters" / slug).glob("*.ipynb"))
    if len(found) != 1:
        raise FileNotFoundError(f"chapters/{slug}/ holds {len(found)} notebooks, expected one")
    return found[0]


def run_chapter(path: Path, timeout: int) -> float:
    """Execute ``path`` in full mode in its folder; return the wall-clock seconds."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    os.environ.pop("COURSE_LIB_QUICK", None)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     allow_errors=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="slugs (default: every chapter page)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run this on a machine with a GPU", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name(0)
    slugs = args.chapters or sorted(p.parent.name for p in ROOT.glob("chapters/*/*.ipynb"))
    data = json.loads(OUT.read_text(encoding="utf-8"))
    for slug in slugs:
        path = page_notebook(slug)
        seconds = run_chapter(path, args.timeout)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        data = merge_run(data, slug, seconds, device, datetime.date.today().isoformat(), digest)
        OUT.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"{slug}: {seconds:.1f} s on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
