"""Run time and peak memory of grading each chapter's solution as Gradescope would.

For each chapter: ``python -m autograder gradescope CHAPTER`` (the working tree, ``--allow-dirty``),
then ``/autograder/run_autograder`` in a fresh root (the harness of
tests/test_autograder_gradescope.py: no network, Docker's default capabilities, so the fallback
runner grades, as inside Gradescope) on the chapter's source notebook as the submission. Prints
per chapter: the wall time of run_autograder, the points, and the peak resident memory (MiB) of
the trusted grader process, of the student's kernel, and their sum (an upper bound of what the
container holds at once; Gradescope's default container has 768 MB), as reported in
results.json's ``extra_data.peak_rss_mb``. Not asserted anywhere.

    .venv/bin/python bench/platform_grading.py [CHAPTER ...] [--json out.json]

Needs root and bubblewrap (the fresh root); the repository's virtual environment stands for the
image that setup.sh builds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.cli import main as cli_main  # noqa: E402
from autograder.gradescope import total_score  # noqa: E402
from coursebook.chapters import all_chapters, find_chapter  # noqa: E402
from tests.test_autograder_gradescope import run_gradescope  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("chapters", nargs="*", help="default: every chapter")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    print(f"{'chapter':24} {'seconds':>8} {'points':>10} {'grader MiB':>11} {'kernel MiB':>11} "
          f"{'sum MiB':>8}  runner")
    chapters = [find_chapter(n) for n in args.chapters] if args.chapters else all_chapters()
    for chapter in chapters:
        with tempfile.TemporaryDirectory(prefix="bench-platform-") as tmp_:
            tmp = Path(tmp_)
            assert cli_main(["gradescope", chapter.slug, "--out", str(tmp / "zip"),
                             "--allow-dirty"]) == 0
            zip_path = tmp / "zip" / f"{chapter.slug}-gradescope.zip"
            t0 = time.time()
            data = run_gradescope(zip_path, tmp, "solution", chapter.source.name,
                                  chapter.source.read_bytes(), Path(sys.prefix))
            seconds = time.time() - t0
        extra = data.get("extra_data", {})
        mem = extra.get("peak_rss_mb", {})
        row = {"chapter": chapter.slug, "seconds": round(seconds, 1), "score": total_score(data),
               "max": extra.get("max_total"), "runner": extra.get("runner"), **{
                   f"{k}_mib": v for k, v in mem.items()}}
        rows.append(row)
        print(f"{chapter.slug:24} {seconds:8.1f} {row['score']:>4g} / {row['max'] or 0:<3g} "
              f"{mem.get('grader', 0):11.0f} {mem.get('kernel', 0):11.0f} "
              f"{mem.get('sum', 0):8.0f}  {row['runner']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
