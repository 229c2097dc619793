"""Count the chapter-notebook executions a pytest run starts, by kind, and print the table.

Usage:  .venv/bin/python bench/count_executions.py [PYTEST ARGS ...]
e.g.    .venv/bin/python bench/count_executions.py -n 2 --dist loadgroup   (what `make test` runs)
        .venv/bin/python bench/count_executions.py tests/test_notebooks.py -k "05 or 07"

It runs pytest with this file as a plugin (``-p bench.count_executions``, in every xdist worker
too). The plugin watches, in the pytest processes, every way the suite executes a notebook:

* ``full``: a whole notebook run top to bottom: ``nbclient.NotebookClient.execute`` in the test
  process (tests/test_colab_runtime.py), a ``pytest --nbval`` subprocess (one per
  notebook it names), ``python -m autograder grade --engine nbgrader`` (one per submission folder),
  and ``jupyter-book build`` (one per chapter; jupyter-cache may skip unchanged ones);
* ``partial``: the setup cell and the exercise cells only: the hardened grader
  (``python -m autograder grade`` without ``--engine nbgrader``, one per submission folder), and
  a chapter's setup cell ``exec``-ed in the test process (seen by an audit hook).

Each process appends its counts to the file named by ``COUNT_EXECUTIONS_LOG``; the runner sums
them. A benchmark, not a test: it exits with pytest's status.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

LOG_ENV = "COUNT_EXECUTIONS_LOG"
ROOT = Path(__file__).resolve().parents[1]
COUNTS: collections.Counter[str] = collections.Counter()


def _count_subprocess(argv: Any) -> None:
    """Count the notebook executions a command line will start (none for most commands)."""
    if not isinstance(argv, (list, tuple)):
        return
    args = [str(a) for a in argv]
    if any(a.startswith("--nbval") for a in args):
        COUNTS["full: nbval"] += sum(a.endswith(".ipynb") for a in args)
    elif "autograder" in args and "grade" in args:
        at = args.index("grade")
        folder = Path(args[at + 2])
        students = sum(p.is_dir() for p in folder.iterdir()) if folder.is_dir() else 1
        if "--engine" in args and args[args.index("--engine") + 1] == "nbgrader":
            COUNTS["full: stock nbgrader"] += students
        else:
            COUNTS["partial: hardened grader"] += students
    elif any(a.endswith("jupyter-book") for a in args) and "build" in args:
        chapters = list(ROOT.glob("chapters/*/*.ipynb"))
        COUNTS["full: book build (before jupyter-cache)"] += len(chapters)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """An in-process ``exec`` of a chapter's setup cell (it seeds and picks the device)."""
    if event == "exec" and args:
        names = getattr(args[0], "co_names", ())
        if "seed_everything" in names and "get_device" in names and "device" in names:
            COUNTS["partial: setup cell exec'd in the test process"] += 1


def _install() -> None:
    """Patch the places notebooks start from, in this process."""
    import nbclient

    original_execute = nbclient.NotebookClient.execute
    original_popen = subprocess.Popen.__init__

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        """One whole notebook run by nbclient in this process."""
        COUNTS["full: nbclient in the test process"] += 1
        return original_execute(self, *args, **kwargs)

    def popen(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        """Every subprocess, counted by what its command line runs."""
        _count_subprocess(args)
        original_popen(self, args, *rest, **kwargs)

    nbclient.NotebookClient.execute = execute  # type: ignore[method-assign]
    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
    sys.addaudithook(_audit)


def pytest_configure(config: Any) -> None:
    """Start counting, in this process, when the runner asked for it."""
    if os.environ.get(LOG_ENV):
        _install()


def pytest_unconfigure(config: Any) -> None:
    """Append this process's counts to the runner's log."""
    if os.environ.get(LOG_ENV) and COUNTS:
        with open(os.environ[LOG_ENV], "a") as log:
            log.write(json.dumps(dict(COUNTS)) + "\n")


def summarize(log: Path) -> dict[str, int]:
    """The counts of every process that wrote to ``log``, summed."""
    total: collections.Counter[str] = collections.Counter()
    for line in log.read_text().splitlines():
        total.update(json.loads(line))
    return dict(sorted(total.items()))


def main() -> int:
    """Run pytest with the plugin and print the summed counts."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "counts.jsonl"
        log.touch()
        env = {**os.environ, LOG_ENV: str(log)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "bench.count_executions",
                               *sys.argv[1:]], cwd=ROOT, env=env)
        counts = summarize(log)
    print("\nnotebook executions started by this run:")
    for kind, n in counts.items():
        print(f"  {n:5d}  {kind}")
    full = sum(n for k, n in counts.items() if k.startswith("full"))
    partial = sum(n for k, n in counts.items() if k.startswith("partial"))
    print(f"  {full:5d}  full in all, {partial} partial (setup and exercise cells only)")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
