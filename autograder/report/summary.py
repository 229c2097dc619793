"""The instructor's one page: distribution, pass rates, what the class got wrong, ungraded files.

Rendered from ``templates/summary.html`` with every value escaped (file names, student ids and
failure messages carry students' text).
"""

from __future__ import annotations

import base64
import re
import statistics
from pathlib import Path

from autograder.chapter_spec import ChapterSpec, ExerciseSpec
from autograder.report.pages import render
from autograder.results import NOT_TAMPER_PROOF, FileRow, GradeResult

_NUMBER = re.compile(r"-?\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b|\bnan\b|-?\binf\b", re.I)
_CASE_PREFIX = re.compile(r"^case \d+ \([^\n]*?\): ")


def failure_kind(message: str) -> str:
    """A failure message with what varies between students removed, to count alike failures.

    The case prefix goes, only the first line is kept (the slip's own words when there is one),
    numbers become ``#``.

    Example:
        >>> failure_kind("case 2 (float32, masked): output: largest error 0.31 at index (0, 1)")
        'output: largest error # at index (#, #)'
    """
    first = _CASE_PREFIX.sub("", message.strip()).split("\n", 1)[0].strip()
    return _NUMBER.sub("#", first)[:300]


def common_failures(chapter: ChapterSpec, results: list[GradeResult],
                    top: int = 5) -> dict[str, list[tuple[str, int, str]]]:
    """Per exercise, the ``top`` most common failures: ``(kind, students, an example)``.

    Only graded files count; each student counts once per kind of failure.
    """
    out: dict[str, list[tuple[str, int, str]]] = {}
    for ex in chapter.exercises:
        counts: dict[str, int] = {}
        example: dict[str, str] = {}
        for r in results:
            res = r.exercises.get(ex.exercise_id)
            if r.status != "graded" or (res is not None and res.status == "passed"):
                continue
            kinds: dict[str, str] = {}
            for m in (res.messages if res is not None else [])[:50]:
                kinds.setdefault(failure_kind(str(m)), str(m))
            for k, m in kinds.items():
                counts[k] = counts.get(k, 0) + 1
                example.setdefault(k, m)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        out[ex.exercise_id] = [(k, n, example[k]) for k, n in ranked]
    return out


def _totals(chapter: ChapterSpec, results: list[GradeResult]) -> dict[str, float] | None:
    """Mean, median, full marks and zeros of the totals (``None`` without results)."""
    totals = [float(r.total) for r in results]
    if not totals:
        return None
    return {"mean": statistics.mean(totals), "median": statistics.median(totals),
            "full": sum(t == chapter.max_total for t in totals),
            "zero": sum(t == 0 for t in totals)}


def _pass_rates(chapter: ChapterSpec,
                results: list[GradeResult]) -> list[tuple[ExerciseSpec, int, str]]:
    """``(exercise, students who passed, pass rate)`` of each exercise."""
    rates = []
    for ex in chapter.exercises:
        passed = sum(1 for r in results if (o := r.exercises.get(ex.exercise_id)) is not None
                     and o.status == "passed")
        rates.append((ex, passed, f"{passed / len(results):.0%}" if results else "-"))
    return rates


def write_summary(path: Path, chapter: ChapterSpec, results: list[GradeResult],
                  rows: list[FileRow], plot: Path | None = None,
                  similarity_flags: int | None = None, wall: float | None = None) -> None:
    """Write the instructor's one page (see the module docstring).

    Args:
        path: where to write it (``summary.html``).
        chapter: the chapter's exercises.
        results: every student's result in grades.csv.
        rows: every file found (``report.csv``'s rows); those not graded are listed.
        plot: the score distribution PNG, embedded when it exists.
        similarity_flags: how many similarity flags were raised (``None``: no report).
        wall: the run's wall time in seconds.
    """
    failures = common_failures(chapter, results)
    picture = base64.b64encode(plot.read_bytes()).decode() if plot and plot.exists() else ""
    page = render(
        "summary.html", chapter=chapter.name, n_results=len(results),
        n_graded=sum(1 for r in results if r.status == "graded"),
        problems=[row for row in rows if not row.graded], wall=wall,
        totals=_totals(chapter, results), max_total=chapter.max_total, plot=picture,
        exercises=_pass_rates(chapter, results),
        failures=[(ex, failures.get(ex.exercise_id, [])) for ex in chapter.exercises],
        similarity_flags=similarity_flags,
        not_tamper_proof=NOT_TAMPER_PROOF if any(r.engine == "nbgrader" for r in results) else "")
    path.write_text(page, encoding="utf-8", errors="backslashreplace")
