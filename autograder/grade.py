"""``python -m autograder grade CHAPTER SUBMISSIONS``: grade a batch, write grades and feedback.

Outputs under ``--out`` (default ``grading-out/``): ``grades.csv`` (student_id, one column per
exercise, total, max_total) and ``grades_long.csv``, ``canvas_grades.csv`` and
``moodle_grades.csv`` (LMS imports, :mod:`autograder.lms`), ``report.csv`` (every file: student,
status, reason, seconds), ``summary.html`` (the instructor's one page), ``similarity.html`` and
``similarity.csv`` (solutions that look copied, :mod:`autograder.similarity`; never changes a
grade), ``feedback/<student>.html``, ``gradebook.db`` (nbgrader's gradebook, written by this
process only), ``score_distribution.png``, ``results/<student>.json`` (the cache: a file whose
bytes, the chapter's source and the engine are unchanged is not graded again, so re-running gives
the same grades and a late file grades only itself).

Nothing one file causes stops the batch: discovery and validation turn every problem into that
file's reason (:mod:`autograder.submissions`), each submission is graded inside its own
``try``, and each output is written on its own, so a failure there is reported and the other
outputs are still written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import secrets
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from autograder import __version__
from autograder.chapter_spec import ChapterSpec, load_chapter_spec
from autograder.paths import Chapter, find_chapters, register_extra_exercises
from autograder.report import (plot_distribution, render_feedback, write_gradebook,
                               write_grades_csv, write_report_csv, write_summary)
from autograder.sandbox import INPUTS_FOLDER
from autograder.submissions import (InvalidSubmission, SkippedEntry, discover, extract_zip,
                                    load_notebook, printable, read_roster, RosterError)
from course_lib.exercises._common import using_secret


def safe_name(student_id: str) -> str:
    """A file name for a student's feedback and cache, distinct for distinct ids.

    Example:
        >>> safe_name("s1001"), safe_name("a/b") != safe_name("a_b")
        ('s1001', True)
    """
    name = re.sub(r"[^A-Za-z0-9@.+_-]", "_", student_id)[:100] or "_"
    if name != student_id or name in (".", ".."):
        digest = hashlib.sha256(student_id.encode("utf-8", "backslashreplace")).hexdigest()[:8]
        name = f"{name}-{digest}"
    return name


def _empty_result(spec: ChapterSpec, sid: str, rel: str, digest: str, engine: str) -> dict[str, Any]:
    return {"student_id": sid, "file": rel, "sha256": digest, "source_sha": spec.source_sha,
            "engine": engine, "version": __version__, "status": "graded", "reason": "",
            "notes": [], "exercises": {}, "total": 0.0, "max_total": spec.max_total,
            "seconds": 0.0}


def _finish(spec: ChapterSpec, result: dict[str, Any]) -> dict[str, Any]:
    for ex in spec.exercises:
        result["exercises"].setdefault(ex.exercise_id, {
            "points": 0.0, "max_points": ex.points, "status": "not graded",
            "messages": [result.get("reason") or "not graded"], "notes": [], "logs": []})
    result["total"] = float(sum(r["points"] for r in result["exercises"].values()))
    result["max_total"] = spec.max_total
    return result


def grade_hardened_one(spec: ChapterSpec, nb, result: dict[str, Any], judge, course_dir: Path,
                       work: Path, slot: int, limits) -> dict[str, Any]:
    from autograder.hardened import run_submission
    from autograder.rebuild import plan_submission

    try:
        plan = plan_submission(spec, nb)
    except (RecursionError, MemoryError, ValueError, TypeError) as err:
        result.update(status="could not grade", reason=f"the notebook's cells could not be "
                      f"matched to the exercises ({type(err).__name__})")
        return result
    result["notes"] += plan.notes
    records = work / "records" / safe_name(result["student_id"])
    if records.exists():
        shutil.rmtree(records)
    per_ex, notes = run_submission(spec, plan, judge, course_dir, records, slot, limits)
    result["notes"] += notes
    result["exercises"].update(exercise_results(per_ex))
    return result


def exercise_results(per_ex: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The hardened engine's per-exercise results as the plain dicts of a result file."""
    return {eid: {"points": r.points, "max_points": r.max_points, "status": r.status,
                  "messages": r.messages, "notes": r.notes,
                  "logs": [{"label": log.label, "source": log.source, "output": log.output,
                            "error": log.error} for log in r.logs]}
            for eid, r in per_ex.items()}


def _read_cache(path: Path) -> dict[str, Any] | None:
    """A cached result, or None when there is none or it cannot be used."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    needed = ("student_id", "status", "exercises", "total")
    return old if isinstance(old, dict) and all(k in old for k in needed) else None


FAILED = object()


def _step(failures: list[str], what: str, fn: Callable[[], Any]) -> Any:
    """Run one output step; a failure is reported (``FAILED``) and the next steps still run."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one output never stops the others
        failures.append(f"{what}: {type(err).__name__}: {str(err)[:300]}")
        return FAILED


def run_grade(args) -> int:
    t0 = time.time()
    from autograder.nbgrader_setup import setup_alembic

    setup_alembic()
    chapter: Chapter = find_chapters(args.source_root, args.release_root, [args.chapter])[0]
    register_extra_exercises()
    spec = load_chapter_spec(chapter.name, chapter.exercise_chapter, chapter.source,
                             chapter.release)
    out: Path = args.out.resolve()
    for sub in ("feedback", "results", "work"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    submissions: Path = args.submissions
    if not submissions.exists():
        print(f"no such folder or zip: {submissions}", file=sys.stderr)
        return 2
    skipped: list[SkippedEntry] = []
    if submissions.is_file() and submissions.suffix.lower() == ".zip":
        submissions = extract_zip(submissions, out / "work" / "extracted", skipped)
    try:
        roster = read_roster(args.roster) if args.roster else None
    except RosterError as err:
        print(printable(f"roster: {err}"), file=sys.stderr)
        return 2
    roster_rows = [{"file": roster.name, "mapping": "roster", "status": "roster warning",
                    "reason": warning} for warning in (roster.warnings if roster else [])]
    for row in roster_rows:
        print(printable(f"roster warning: {row['reason']}"), file=sys.stderr)
    files = discover(submissions.resolve(), chapter.slug, roster, skipped)
    rows: list[dict[str, Any]] = []
    todo: list[tuple[dict[str, Any], Any]] = []
    results: dict[str, dict[str, Any]] = {}
    cached: list[dict[str, Any]] = []
    code: dict[str, dict[str, str]] = {}  # student -> exercise -> code, for the similarity report
    for sf in files:
        row = {"file": sf.rel, "student_id": sf.student or "", "mapping": sf.rule or sf.problem}
        rows.append(row)
        if not sf.student:
            row.update(status="not read" if sf.irregular else "not mapped", reason=sf.problem)
            continue
        cache = out / "results" / f"{safe_name(sf.student)}.json"
        nb, notes, invalid = None, [], ""
        try:
            if sf.irregular or sf.path is None:
                reason = sf.irregular or "the file was not extracted"
                raise InvalidSubmission(reason, hashlib.sha256(reason.encode()).hexdigest())
            nb, notes, digest = load_notebook(sf.path)
        except InvalidSubmission as err:
            digest, invalid = err.digest, str(err)
        except Exception as err:  # noqa: BLE001 - one file never stops the batch
            digest, invalid = "", f"the file could not be read ({type(err).__name__})"
        if nb is not None:
            try:
                from autograder.similarity import student_code

                code[sf.student] = student_code(spec, nb)
            except Exception:  # noqa: BLE001 - the similarity report is advisory
                pass
        old = _read_cache(cache) if cache.exists() and not args.force else None
        if old is not None and (old.get("sha256"), old.get("source_sha"), old.get("engine"),
                                old.get("version")) == (digest, spec.source_sha, args.engine,
                                                        __version__) and digest:
            results[sf.student] = old
            cached.append(old)
            row.update(status=old["status"] + " (cached)", reason=old.get("reason", ""),
                       seconds=old.get("seconds", 0))
            continue
        result = _empty_result(spec, sf.student, sf.rel, digest, args.engine)
        result["notes"] += notes
        if invalid:
            result.update(status="could not grade", reason=invalid)
            results[sf.student] = _finish(spec, result)
            row.update(status="could not grade", reason=invalid)
            continue
        todo.append((result, nb))
        row["_result"] = result

    if args.engine == "hardened":
        _run_hardened(args, spec, todo, out, results)
    else:
        from autograder.engine_nbgrader import grade_with_nbgrader

        graded = grade_with_nbgrader(chapter, spec, todo, out, progress=not args.no_progress)
        for r in graded:
            results[r["student_id"]] = _finish(spec, r)

    for row in rows:
        r = row.pop("_result", None)
        if r is not None:
            r = results.get(r["student_id"], r)
            row.update(status=r["status"], reason=r.get("reason", ""), seconds=r.get("seconds", 0))
    failures: list[str] = []
    for sid, r in results.items():
        _step(failures, f"results/{safe_name(sid)}.json", lambda: (
            out / "results" / f"{safe_name(sid)}.json").write_text(json.dumps(r, indent=1)))
        page = out / "feedback" / f"{safe_name(sid)}.html"
        if r.get("nbgrader_feedback") and Path(r["nbgrader_feedback"]).exists():
            _step(failures, f"feedback of {sid}", lambda: shutil.copyfile(
                r["nbgrader_feedback"], page))
        elif not (r.get("engine") == "nbgrader" and page.exists() and r in cached):
            _step(failures, f"feedback of {sid}", lambda: page.write_text(
                render_feedback(spec, r), encoding="utf-8", errors="backslashreplace"))
    final = sorted(results.values(), key=lambda r: r["student_id"])
    _step(failures, "grades.csv", lambda: write_grades_csv(out / "grades.csv", spec, final))
    _step(failures, "report.csv", lambda: write_report_csv(out / "report.csv",
                                                           roster_rows + rows))
    _step(failures, "LMS files", lambda: _write_lms(out, spec, final, args.roster))
    plot = None
    if final:
        _step(failures, "gradebook.db", lambda: write_gradebook(
            out / "gradebook.db", chapter.name, chapter.slug, spec, final))
        if _step(failures, "score_distribution.png", lambda: plot_distribution(
                out / "score_distribution.png", spec, final)) is not FAILED:
            plot = out / "score_distribution.png"
    flags = _step(failures, "similarity report", lambda: _write_similarity(out, spec, code))
    flags = None if flags is FAILED else flags
    wall = time.time() - t0
    _step(failures, "summary.html", lambda: write_summary(
        out / "summary.html", spec, final, rows, plot, flags, wall))
    graded_now = sum(1 for r, _ in todo)
    problems = [row for row in rows if row.get("status") not in ("graded", "graded (cached)")]
    # every line through printable: file names and reasons carry students' text, and a control
    # character (ESC, a bidi override) would reach the instructor's terminal raw
    print("\n" + printable(f"{chapter.name}: {len(final)} students in grades.csv ({graded_now} "
                           f"graded now, {len(final) - graded_now} from the cache or invalid), "
                           f"engine {args.engine}, wall time {wall:.1f} s"))
    if problems:
        print(f"could not grade {len(problems)} file(s):")
        for row in problems:
            print(printable(f"  {row['file']}: {row['status']}: {row.get('reason', '')}"))
    if flags:
        print(printable(f"similarity: {flags} flag(s) of solutions that look copied: "
                        f"{out / 'similarity.html'} (grades are not changed by it)"))
    for failure in failures:
        print(printable(f"could not write {failure}"), file=sys.stderr)
    print(printable(f"grades: {out / 'grades.csv'}; summary: {out / 'summary.html'}; feedback: "
                    f"{out / 'feedback'}; report: {out / 'report.csv'}"))
    return 1 if failures else 0


def _write_lms(out: Path, spec: ChapterSpec, final: list[dict[str, Any]],
               roster_path: Path | None) -> None:
    from autograder.lms import read_roster_rows, write_lms_files

    write_lms_files(out, spec, final, read_roster_rows(roster_path))


def _write_similarity(out: Path, spec: ChapterSpec, code: dict[str, dict[str, str]]) -> int:
    from autograder.similarity import analyse, write_report

    report = analyse(spec, code)
    write_report(out, spec, report)
    return len(report.flags)


def _prepare_sandbox_course(spec: ChapterSpec, course_dir: Path, judge) -> None:
    """course_lib for the sandbox (no exercise module, no answer's body) and the hidden inputs."""
    from course_lib import grading

    from autograder.strip import answers_to_strip, build_sandbox_course_lib

    build_sandbox_course_lib(course_dir, answers_to_strip(spec.exercise_chapter))
    inputs = course_dir / INPUTS_FOLDER
    if inputs.exists():
        shutil.rmtree(inputs)
    # This run's secret, drawn here and never passed to a sandbox (--clearenv): nobody can know
    # the hidden inputs before the run.
    with using_secret(secrets.token_hex(16)):
        judge.write_inputs(inputs, list(grading.chapter_exercises(spec.exercise_chapter)))
    for path in [inputs, *inputs.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def _run_hardened(args, spec: ChapterSpec, todo, out: Path, results: dict) -> None:
    from autograder.cgroups import grader_cgroups
    from autograder.judge import Judge
    from autograder.sandbox import Limits, acquire_slots

    if not todo:
        return
    cgroup_warning = grader_cgroups().warning()
    if cgroup_warning:  # once, before any sandbox: the protections the RLIMITs cannot give
        print(printable(cgroup_warning), file=sys.stderr)
    course_dir = out / "work" / "sandbox-course"
    judge = Judge(spec.answers)
    _prepare_sandbox_course(spec, course_dir, judge)
    limits = Limits(memory_bytes=args.memory_mb << 20, cell_timeout=args.cell_timeout,
                    notebook_timeout=args.notebook_timeout)
    workers = args.workers or os.cpu_count() or 1
    slots, slot_locks = acquire_slots(workers)
    import threading
    lock = threading.Lock()

    def job(item):
        result, nb = item
        with lock:
            slot = slots.pop()
        start = time.time()
        try:
            return grade_hardened_one(spec, nb, result, judge, course_dir, out / "work", slot,
                                      limits)
        except Exception as err:  # noqa: BLE001 - one submission never stops the batch
            result.update(status="could not grade", reason=f"grader error: {type(err).__name__}: {err}")
            return result
        finally:
            result["seconds"] = round(time.time() - start, 2)
            with lock:
                slots.append(slot)

    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc=f"grading {spec.name}", unit="nb", file=sys.stderr,
               disable=args.no_progress)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(job, item) for item in todo]
        for fut in as_completed(futures):
            r = fut.result()
            results[r["student_id"]] = _finish(spec, r)
            bar.update(1)
    bar.close()
    for fd in slot_locks:
        os.close(fd)
