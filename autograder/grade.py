"""``python -m autograder grade CHAPTER SUBMISSIONS``: grade a batch, write grades and feedback.

The stages, each its own module, pass typed results (:mod:`autograder.results`):

1. **ingest** (:mod:`autograder.ingest`): the zip extracted, the roster read, every file found
   and mapped to one student, each read and validated into a
   :class:`~autograder.results.Submission`;
2. the **cache**: a file whose bytes, the chapter's source, the engine and the grader version
   are unchanged keeps its :class:`~autograder.results.GradeResult` (re-running gives the same
   grades, a late file grades only itself);
3. **rebuild, run, judge** (:mod:`autograder.rebuild`, :mod:`autograder.run`,
   :mod:`autograder.judge`): the hardened engine, or stock nbgrader;
4. **report** (:mod:`autograder.report`): ``grades.csv``, ``grades_long.csv``, the LMS files,
   ``report.csv``, ``summary.html``, the similarity report, ``feedback/``, ``gradebook.db``,
   ``score_distribution.png``, ``results/`` (see ``autograder/README.md``).

Nothing one file causes stops the batch: every problem becomes that file's reason, and each
output is written on its own, so a failure there is reported and the other outputs are still
written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from autograder import __version__
from autograder.chapter_spec import ChapterSpec, load_chapter_spec
from autograder.extra_exercises import register_extra_exercises
from autograder.ingest import (
    RosterError,
    SkippedEntry,
    SubmissionFile,
    discover,
    extract_zip,
    read_roster,
    read_submission,
)
from autograder.nbgrader_setup import setup_alembic
from autograder.printable import printable
from autograder.report.write import Batch, write_outputs
from autograder.results import FileRow, GradeResult, Submission, safe_name
from autograder.run.batch import run_hardened
from autograder.run.engine_nbgrader import NOT_TAMPER_PROOF, grade_with_nbgrader
from autograder.run.sandbox import Limits
from coursebook.chapters import Chapter, UnknownChapter, find_chapter


def _points(spec: ChapterSpec) -> dict[str, float]:
    """``exercise id -> points it is worth``, in the chapter's order."""
    return {ex.exercise_id: ex.points for ex in spec.exercises}


def _cached(path: Path, sub: Submission, key: tuple[str, str, str, str]) -> GradeResult | None:
    """The cached result of ``sub``, when there is one for the same file, source, engine and
    grader version."""
    try:
        old = GradeResult.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):
        return None
    return old if old is not None and old.cache_key() == key and sub.sha256 else None


def _ingest(args: argparse.Namespace, chapter: Chapter, out: Path,
            ) -> tuple[list[FileRow], list[SubmissionFile]]:
    """The roster's warnings (as report rows) and every file found and mapped.

    Raises:
        RosterError: the roster cannot be used (the batch stops with the reason).
    """
    submissions: Path = args.submissions
    skipped: list[SkippedEntry] = []
    if submissions.is_file() and submissions.suffix.lower() == ".zip":
        submissions = extract_zip(submissions, out / "work" / "extracted", skipped)
    roster = read_roster(args.roster) if args.roster else None
    roster_rows = [] if roster is None else [
        FileRow(roster.name, mapping="roster", status="roster warning", reason=w)
        for w in roster.warnings]
    for row in roster_rows:
        print(printable(f"roster warning: {row.reason}"), file=sys.stderr)
    return roster_rows, discover(submissions.resolve(), chapter.stem, roster, skipped)


def _sort_files(args: argparse.Namespace, spec: ChapterSpec, out: Path,
                files: list[SubmissionFile], batch: Batch,
                ) -> list[tuple[GradeResult, Submission, FileRow]]:
    """Fill ``batch`` with a row per file, the results of invalid and cached files and the
    submissions read; return the files to grade now."""
    todo = []
    for sf in files:
        row = FileRow(sf.rel, sf.student or "", sf.rule or sf.problem)
        batch.rows.append(row)
        if not sf.student:
            row.status, row.reason = ("not read" if sf.irregular else "not mapped"), sf.problem
            continue
        sub = read_submission(sf)
        batch.submissions.append(sub)
        cache = out / "results" / f"{safe_name(sub.student_id)}.json"
        key = (sub.sha256, spec.source_sha, args.engine, __version__)
        old = _cached(cache, sub, key) if cache.exists() and not args.force else None
        if old is not None:
            batch.results[sub.student_id] = old
            batch.cached.add(sub.student_id)
            row.status, row.reason, row.seconds = old.status + " (cached)", old.reason, old.seconds
            continue
        result = GradeResult.new(sub.student_id, sub.file, sub.sha256, spec.source_sha,
                                 args.engine, spec.max_total)
        result.notes += sub.notes
        if sub.invalid:
            batch.results[sub.student_id] = result.fail(sub.invalid).finish(_points(spec))
            row.status, row.reason = "could not grade", sub.invalid
            continue
        todo.append((result, sub, row))
    return todo


def _run(args: argparse.Namespace, chapter: Chapter, spec: ChapterSpec, out: Path,
         todo: list[tuple[GradeResult, Submission, FileRow]]) -> list[GradeResult]:
    """Grade the files of ``todo`` with the engine of ``args``; the results, finished."""
    pairs = [(result, sub.notebook) for result, sub, _ in todo if sub.notebook is not None]
    if args.engine == "hardened":
        limits = Limits(memory_bytes=args.memory_mb << 20, cell_timeout=args.cell_timeout,
                        notebook_timeout=args.notebook_timeout)
        return run_hardened(spec, pairs, out / "work", limits,
                            args.workers or os.cpu_count() or 1, not args.no_progress)
    graded = grade_with_nbgrader(chapter, spec, pairs, out, progress=not args.no_progress)
    return [r.finish(_points(spec)) for r in graded]


def _print_summary(chapter: Chapter, batch: Batch, graded_now: int, engine: str, wall: float,
                   failures: list[str], flags: int | None, out: Path) -> None:
    """The closing lines on stdout (failures to write on stderr), every one through
    :func:`~autograder.printable.printable`: file names and reasons carry students' text."""
    n = len(batch.results)
    problems = [row for row in batch.rows if not row.graded]
    print("\n" + printable(f"{chapter.slug}: {n} students in grades.csv ({graded_now} "
                           f"graded now, {n - graded_now} from the cache or invalid), "
                           f"engine {engine}, wall time {wall:.1f} s"))
    if engine == "nbgrader":
        print(printable(f"warning: {NOT_TAMPER_PROOF}"))
    if problems:
        print(f"could not grade {len(problems)} file(s):")
        for row in problems:
            print(printable(f"  {row.file}: {row.status}: {row.reason}"))
    if flags:
        print(printable(f"similarity: {flags} flag(s) of solutions that look copied: "
                        f"{out / 'similarity.html'} (grades are not changed by it)"))
    for failure in failures:
        print(printable(f"could not write {failure}"), file=sys.stderr)
    print(printable(f"grades: {out / 'grades.csv'}; summary: {out / 'summary.html'}; feedback: "
                    f"{out / 'feedback'}; report: {out / 'report.csv'}"))


def _chapter(args: argparse.Namespace) -> Chapter:
    """The chapter named on the command line, under ``--root``.

    Raises:
        SystemExit: no chapter (or several) answers to the name; the message lists them.
    """
    try:
        return find_chapter(args.chapter, args.root.resolve())
    except UnknownChapter as err:
        raise SystemExit(str(err)) from None


def run_grade(args: argparse.Namespace) -> int:
    """``grade``: every stage in turn (see the module docstring); the exit status.

    Returns:
        0 when every output was written, 1 when one could not be, 2 when the batch could not
        start (no such folder, an unusable roster).
    """
    t0 = time.time()
    setup_alembic()
    chapter = _chapter(args)
    register_extra_exercises()
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source, chapter.release)
    out: Path = args.out.resolve()
    for sub in ("feedback", "results", "work"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    if not args.submissions.exists():
        print(f"no such folder or zip: {args.submissions}", file=sys.stderr)
        return 2
    try:
        roster_rows, files = _ingest(args, chapter, out)
    except RosterError as err:
        print(printable(f"roster: {err}"), file=sys.stderr)
        return 2
    batch = Batch(chapter.slug, chapter.stem, spec, {}, [], roster_rows, roster=args.roster)
    todo = _sort_files(args, spec, out, files, batch)
    for r in _run(args, chapter, spec, out, todo):
        batch.results[r.student_id] = r
    for result, _, row in todo:
        r = batch.results.get(result.student_id, result)
        row.status, row.reason, row.seconds = r.status, r.reason, r.seconds
    failures, flags = write_outputs(out, batch, lambda: time.time() - t0)
    _print_summary(chapter, batch, len(todo), args.engine, time.time() - t0, failures, flags, out)
    return 1 if failures else 0
