"""The command line of the grading pipeline:
``python -m autograder {grade,gradescope,prairielearn}`` (publishing is ``python -m publish``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import gradescope, prairielearn
from autograder.grade import run_grade
from autograder.platform_common import BundleError
from coursebook.chapters import REPO, UnknownChapter, find_chapter


def _add_root(p: argparse.ArgumentParser) -> None:
    """The ``--root`` option: where the chapters live."""
    p.add_argument("--root", type=Path, default=REPO,
                   help="the folder holding solutions/NN-slug/ and chapters/NN-slug/ "
                   "(default: the repository)")


def _add_grade(sub: argparse._SubParsersAction) -> None:
    """The ``grade`` command's options."""
    p = sub.add_parser("grade", help="grade a folder or zip of submitted notebooks")
    p.add_argument("chapter", help="01-seq2seq, 01 or seq2seq")
    p.add_argument("submissions", type=Path, help="folder of .ipynb files (flat or one folder per "
                   "student) or an LMS zip")
    p.add_argument("--roster", type=Path, help="CSV with a student_id column (and optional "
                   "name/email/aliases columns) used to map file names to students")
    p.add_argument("--out", type=Path, default=Path("grading-out"),
                   help="output folder: grades.csv, feedback/, gradebook.db, plots "
                   "(default: ./grading-out)")
    p.add_argument("--engine", choices=["hardened", "nbgrader"], default="hardened",
                   help="hardened (default; judges outside the student's process) or nbgrader "
                   "(stock nbgrader: a baseline or cross-check, NOT tamper-proof: student code "
                   "runs in the kernel that judges it; never use its grades)")
    p.add_argument("--workers", type=int, default=0,
                   help="parallel submissions (default: one per core)")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per cell (hardened)")
    p.add_argument("--notebook-timeout", type=float, default=300.0,
                   help="seconds per submission (hardened)")
    p.add_argument("--memory-mb", type=int, default=3072, help="address-space limit per sandbox")
    p.add_argument("--force", action="store_true", help="regrade files graded before")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_root(p)


def _add_platforms(sub: argparse._SubParsersAction) -> None:
    """The ``gradescope`` and ``prairielearn`` commands' options."""
    for name, what in (("gradescope", "DIR/<chapter>-gradescope.zip: a Gradescope autograder"),
                       ("prairielearn",
                        "DIR/<chapter>/: a PrairieLearn externally graded question")):
        p = sub.add_parser(name, help=what)
        p.add_argument("chapter", help="01-seq2seq, 01 or seq2seq")
        p.add_argument("--out", type=Path, default=Path("platform-out"), help="output folder")
        p.add_argument("--allow-dirty", action="store_true", help="bundle a working tree that "
                       "differs from its commit (marked dirty in bundle.json)")
        p.add_argument("--cell-timeout", type=float, default=60.0)
        p.add_argument("--notebook-timeout", type=float, default=300.0)
        p.add_argument("--memory-mb", type=int, default=3072)
        if name == "gradescope":
            p.add_argument("--hidden-tests", choices=gradescope.HIDDEN_TESTS_VISIBILITY,
                           default="after_published", help="when students see each exercise's "
                           "points and hidden tests' results (default: when you publish grades)")
        if name == "prairielearn":
            p.add_argument("--image", help="grader image named in info.json (required: "
                           "yourorg/name:tag, pushed where PrairieLearn can pull it)")
            p.add_argument("--timeout", type=int, default=prairielearn.MAX_TIMEOUT,
                           help="PrairieLearn's grading timeout in seconds (at most "
                           f"{prairielearn.MAX_TIMEOUT})")
        _add_root(p)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m autograder``."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_grade(sub)
    _add_platforms(sub)
    return parser


def build_platform(args: argparse.Namespace) -> int:
    """``gradescope|prairielearn CHAPTER --out DIR``: write the platform's bundle.

    Returns:
        0, or 2 when the bundle cannot be made (a dirty tree without ``--allow-dirty``, a
        PrairieLearn question without ``--image`` or with a timeout over the platform's).
    """
    try:
        chapter = find_chapter(args.chapter, args.root.resolve())
    except UnknownChapter as err:
        raise SystemExit(str(err)) from None
    settings = {"cell_timeout": args.cell_timeout, "notebook_timeout": args.notebook_timeout,
                "memory_mb": args.memory_mb}
    try:
        if args.command == "gradescope":
            built = gradescope.build(chapter, args.out, args.allow_dirty, settings,
                                     args.hidden_tests)
            print(f"wrote {built}")
        else:
            built = prairielearn.build(chapter, args.out, args.allow_dirty, args.image,
                                       args.timeout, settings)
            print(f"wrote {built}")
    except BundleError as err:
        print(err, file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (default: the command line); its exit status."""
    args = build_parser().parse_args(argv)
    if args.command in ("gradescope", "prairielearn"):
        return build_platform(args)
    return run_grade(args)
