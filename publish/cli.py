"""The command line of publishing: ``python -m publish {release,check,measure} [CHAPTER ...]``.

A chapter is named by its slug, number or stem (``01-seq2seq``, ``01``, ``seq2seq``); no name means
every chapter with a source notebook. ``--root DIR`` publishes a copy of the course's layout (a
test's folder): sources from ``DIR/solutions``, releases, Colab copies and measured values to
``DIR/chapters``, ``DIR/colab`` and ``DIR/_data/measured``. ``--source-root`` and ``--release-root``
name the two sides apart (the releases go to ``--release-root``, a folder named ``chapters``, the
Colab copies and measured values beside it). The website's configuration, bibliography and README
are always the repository's.

Exit status: 0 done or in sync; 1 ``check`` found drift (or no chapter); 2 a chapter could not be
released or measured (the message says why).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coursebook import REPO, Chapter, UnknownChapter, all_chapters, find_chapter
from publish import measured
from publish.drift import drifted
from publish.errors import ReleaseError
from publish.release import release


def _add_roots(p: argparse.ArgumentParser) -> None:
    """The arguments every command takes: chapter names and where the layout is."""
    p.add_argument("chapters", nargs="*", help="01-seq2seq, 01 or seq2seq (default: all)")
    p.add_argument("--root", type=Path, default=None,
                   help="folder holding solutions/, chapters/, colab/ and _data/measured/ "
                   "(default: the repository)")
    p.add_argument("--source-root", type=Path, default=None,
                   help="folder named solutions holding <slug>/<stem>.ipynb "
                   "(default: ROOT/solutions)")
    p.add_argument("--release-root", type=Path, default=None,
                   help="folder named chapters that receives the releases; colab/ and "
                   "_data/measured/ are beside it (default: ROOT/chapters)")


def _roots(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(source root, release root)`` from ``--root``, ``--source-root`` and ``--release-root``."""
    root = args.root if args.root is not None else REPO
    return (args.source_root or root / "solutions", args.release_root or root / "chapters")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m publish``."""
    parser = argparse.ArgumentParser(prog="python -m publish", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_roots(sub.add_parser("release", help="write chapters/ and colab/ from solutions/ "
                              "(nbgrader generate_assignment)"))
    _add_roots(sub.add_parser("check", help="exit 1 naming each generated notebook that drifted "
                              "from its source, and each stale repository address"))
    p = sub.add_parser("measure", help="write _data/measured/<stem>.json (the numbers of the Colab "
                       "copies' text) from the executed book; run `make book` first")
    _add_roots(p)
    p.add_argument("--build", type=Path, default=measured.BUILD,
                   help="the built book (default: _build, where `make book` writes it)")
    return parser


def chapters_at(source_root: Path, release_root: Path, names: list[str]) -> list[Chapter]:
    """The chapters named (all when ``names`` is empty) with sources under ``source_root`` and
    generated copies beside ``release_root``.

    Raises:
        SystemExit: a root is not named as the layout needs, or a name matches no chapter.
    """
    for root, name in ((source_root, "solutions"), (release_root, "chapters")):
        if root.name != name:
            raise SystemExit(f"{root}: the folder must be named {name}/ (the course's layout)")
    try:
        found = ([find_chapter(n, source_root.parent) for n in names] if names
                 else list(all_chapters(source_root.parent)))
    except UnknownChapter as err:
        raise SystemExit(str(err)) from err
    return [c.generated_under(release_root.parent) for c in found]


def _measure(chapters: list[Chapter], build: Path) -> int:
    """``measure``: each chapter's values from the executed book; 2 when one cannot be recorded."""
    failed = 0
    for chapter in chapters:
        try:
            print(f"wrote {measured.record(chapter, build)}")
        except measured.MeasuredError as err:
            print(err, file=sys.stderr)
            failed = 2
    if not failed:
        print("now run `make release` to write the values into the Colab copies")
    return failed


def _release(chapters: list[Chapter]) -> int:
    """``release``: write the chapters' generated notebooks, naming those whose bytes changed."""
    written = release(chapters, warn=lambda line: print(f"warning: {line}", file=sys.stderr))
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"unchanged: {', '.join(c.slug for c in chapters)} (same bytes, nothing written)")
    return 0


def _check(chapters: list[Chapter]) -> int:
    """``check``: 1 naming what drifted, 0 when every generated notebook is in sync."""
    lines = drifted(chapters)
    for line in lines:
        print(f"drifted: {line}", file=sys.stderr)
    if lines:
        print("run `make release` (python -m publish release) and commit chapters/ and colab/; "
              "edit by hand each file:line named above", file=sys.stderr)
        return 1
    print(f"generated notebooks in sync: {', '.join(c.slug for c in chapters)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m publish`` with ``argv``; return the exit status."""
    args = build_parser().parse_args(argv)
    source_root, release_root = _roots(args)
    chapters = chapters_at(source_root, release_root, args.chapters)
    if not chapters:
        print(f"no chapters with a source notebook under {source_root}", file=sys.stderr)
        return 1 if args.command == "check" else 0
    if args.command == "measure":
        return _measure(chapters, args.build)
    try:
        return _release(chapters) if args.command == "release" else _check(chapters)
    except ReleaseError as err:
        print(err, file=sys.stderr)
        return 2
