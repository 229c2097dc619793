"""The run stage of ``grade``: every submission through the hardened engine, in parallel.

One sandbox slot per worker (its own uid and cgroup, held with a lock no other grading run on
the machine can take); each submission is planned (:mod:`autograder.rebuild`), run and judged
(:mod:`autograder.run.hardened`) inside its own ``try``, so nothing one file does stops the
batch.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode
from tqdm import tqdm

from autograder.chapter_spec import ChapterSpec
from autograder.judge import Judge
from autograder.printable import printable
from autograder.rebuild import plan_submission
from autograder.results import GradeResult, safe_name
from autograder.run.cgroups import grader_cgroups
from autograder.run.course import prepare_sandbox_course
from autograder.run.hardened import SandboxFactory, run_submission
from autograder.run.sandbox import Limits, Sandbox, acquire_slots


@dataclass(frozen=True)
class Workspace:
    """Where one submission runs: the sandbox's course folder, the judge, the slot, the limits."""

    spec: ChapterSpec
    judge: Judge
    course_dir: Path
    records: Path
    slot: int
    limits: Limits
    factory: SandboxFactory = Sandbox


def grade_notebook(ws: Workspace, nb: NotebookNode, result: GradeResult) -> GradeResult:
    """Plan, run and judge one valid notebook into ``result`` (its exercises and notes).

    Args:
        ws: the run's workspace; ``ws.records`` is this submission's own record folder.
        nb: the validated notebook.
        result: the student's result so far (notes of ingest).

    Returns:
        ``result``, with the outcome of every exercise that ran (:meth:`GradeResult.finish`
        fills in the rest).
    """
    try:
        plan = plan_submission(ws.spec, nb)
    except (RecursionError, MemoryError, ValueError, TypeError) as err:
        return result.fail(f"the notebook's cells could not be matched to the exercises "
                           f"({type(err).__name__})")
    result.notes += plan.notes
    per_ex, notes = run_submission(ws.spec, plan, ws.judge, ws.course_dir, ws.records, ws.slot,
                                   ws.limits, sandbox_factory=ws.factory)
    result.notes += notes
    result.exercises.update(per_ex)
    return result


def _grade_in_slot(ws: Workspace, nb: NotebookNode, result: GradeResult, work: Path) -> None:
    """:func:`grade_notebook` with a fresh record folder; a grader error fails only this file."""
    records = work / "records" / safe_name(result.student_id)
    if records.exists():
        shutil.rmtree(records)
    start = time.time()
    try:
        grade_notebook(Workspace(ws.spec, ws.judge, ws.course_dir, records, ws.slot, ws.limits),
                       nb, result)
    except Exception as err:  # noqa: BLE001 - one submission never stops the batch
        result.fail(f"grader error: {type(err).__name__}: {err}")
    finally:
        result.seconds = round(time.time() - start, 2)


def run_hardened(spec: ChapterSpec, todo: list[tuple[GradeResult, NotebookNode]], work: Path,
                 limits: Limits, workers: int, progress: bool) -> list[GradeResult]:
    """Grade every ``(result, notebook)`` of ``todo`` in ``workers`` parallel sandboxes.

    Args:
        spec: the chapter.
        todo: the valid submissions, each with its result so far.
        work: the run's scratch folder (the sandbox course and the records live there).
        limits: time and memory limits of each sandbox.
        workers: how many sandboxes at once.
        progress: show a progress bar on stderr.

    Returns:
        The results, finished, in the order they completed.
    """
    if not todo:
        return []
    cgroup_warning = grader_cgroups().warning()
    if cgroup_warning:  # once, before any sandbox: the protections the RLIMITs cannot give
        print(printable(cgroup_warning), file=sys.stderr)
    judge = Judge(spec.answers)
    prepare_sandbox_course(spec, work / "sandbox-course", judge)
    slots, slot_locks = acquire_slots(workers)
    lock = threading.Lock()
    points = {ex.exercise_id: ex.points for ex in spec.exercises}

    def job(item: tuple[GradeResult, NotebookNode]) -> GradeResult:
        result, nb = item
        with lock:
            slot = slots.pop()
        try:
            ws = Workspace(spec, judge, work / "sandbox-course", work / "records", slot, limits)
            _grade_in_slot(ws, nb, result, work)
        finally:
            with lock:
                slots.append(slot)
        return result

    done = []
    bar = tqdm(total=len(todo), desc=f"grading {spec.name}", unit="nb", file=sys.stderr,
               disable=not progress)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in as_completed([pool.submit(job, item) for item in todo]):
            done.append(fut.result().finish(points))
            bar.update(1)
    bar.close()
    for fd in slot_locks:
        os.close(fd)
    return done
