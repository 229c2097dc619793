"""The command line of the grading pipeline:
``python -m autograder {grade,gradescope,prairielearn}`` (publishing is ``python -m publish``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from autograder.paths import RELEASE_ROOT, SOURCE_ROOT


def _add_roots(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-root", type=Path, default=SOURCE_ROOT,
                   help="folder of the instructor's NN-slug/slug.ipynb (default: solutions/)")
    p.add_argument("--release-root", type=Path, default=RELEASE_ROOT,
                   help="folder of the student releases (default: chapters/)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("grade", help="grade a folder or zip of submitted notebooks")
    p.add_argument("chapter", help="01-seq2seq, 01 or seq2seq")
    p.add_argument("submissions", type=Path, help="folder of .ipynb files (flat or one folder per "
                   "student) or an LMS zip")
    p.add_argument("--roster", type=Path, help="CSV with a student_id column (and optional "
                   "name/email/aliases columns) used to map file names to students")
    p.add_argument("--out", type=Path, default=Path("grading-out"),
                   help="output folder: grades.csv, feedback/, gradebook.db, plots (default: ./grading-out)")
    p.add_argument("--engine", choices=["hardened", "nbgrader"], default="hardened")
    p.add_argument("--workers", type=int, default=0, help="parallel submissions (default: one per core)")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per cell (hardened)")
    p.add_argument("--notebook-timeout", type=float, default=300.0,
                   help="seconds per submission (hardened)")
    p.add_argument("--memory-mb", type=int, default=3072, help="address-space limit per sandbox")
    p.add_argument("--force", action="store_true", help="regrade files graded before")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_roots(p)

    for name, what in (("gradescope", "DIR/<chapter>-gradescope.zip: a Gradescope autograder"),
                       ("prairielearn", "DIR/<chapter>/: a PrairieLearn externally graded question")):
        p = sub.add_parser(name, help=what)
        p.add_argument("chapter", help="01-seq2seq, 01 or seq2seq")
        p.add_argument("--out", type=Path, default=Path("platform-out"), help="output folder")
        p.add_argument("--allow-dirty", action="store_true", help="bundle a working tree that "
                       "differs from its commit (marked dirty in bundle.json)")
        p.add_argument("--cell-timeout", type=float, default=60.0)
        p.add_argument("--notebook-timeout", type=float, default=300.0)
        p.add_argument("--memory-mb", type=int, default=3072)
        if name == "prairielearn":
            p.add_argument("--image", help="grader image named in info.json")
            p.add_argument("--timeout", type=int, default=600, help="PrairieLearn's grading timeout")
        _add_roots(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("gradescope", "prairielearn"):
        from autograder.platform_common import build_command

        return build_command(args)
    from autograder.grade import run_grade

    return run_grade(args)
