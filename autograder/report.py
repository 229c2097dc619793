"""Outputs of a grading run: feedback HTML, gradebook, grades.csv, the score plot, the summary."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from autograder import csvsafe
from autograder.chapter_spec import ChapterSpec

_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
.passed{color:#116329}.failed,.error{color:#a40e26}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}.note{color:#6a4a00}"""


def render_feedback(chapter: ChapterSpec, result: dict[str, Any]) -> str:
    """The student's feedback page: scores, what failed and why, repairs, their cells' outputs.

    Never included: the hidden test code, the hidden inputs, the reference outputs.
    """
    e = html.escape
    sid = result["student_id"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(chapter.name)} "
             f"feedback: {e(sid)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{e(chapter.name)}: feedback for {e(sid)}</h1>",
             f"<p>File: <code>{e(result.get('file', ''))}</code></p>"]
    if result["status"] != "graded":
        parts.append(f"<p class='error'><b>Could not grade this file:</b> "
                     f"{e(result.get('reason', ''))}</p>")
    parts.append(f"<p><b>Score: {result['total']:g} / {result['max_total']:g}</b></p>")
    for n in result.get("notes", []):
        parts.append(f"<p class='note'>Note: {e(n)}</p>")
    parts.append("<table><tr><th>exercise</th><th>points</th><th>result</th></tr>")
    for ex in chapter.exercises:
        r = result["exercises"].get(ex.exercise_id, {})
        parts.append(f"<tr><td>{e(ex.name)}</td><td>{r.get('points', 0):g} / {ex.points:g}</td>"
                     f"<td class='{e(r.get('status', 'failed'))}'>{e(r.get('status', 'not graded'))}"
                     "</td></tr>")
    parts.append("</table>")
    for ex in chapter.exercises:
        r = result["exercises"].get(ex.exercise_id)
        if r is None:
            continue
        parts.append(f"<h2>{e(ex.name)} ({r['points']:g} / {ex.points:g})</h2>")
        for n in r.get("notes", []):
            parts.append(f"<p class='note'>Note: {e(n)}</p>")
        if r.get("messages"):
            parts.append("<p>Hidden tests:</p><pre>" + e("\n".join(r["messages"])) + "</pre>")
        elif r["status"] == "passed":
            parts.append("<p class='passed'>All hidden test cases passed.</p>")
        for log in r.get("logs", []):
            parts.append(f"<h3>{e(log['label'])}</h3><pre>{e(log['source'])}</pre>")
            if log.get("output"):
                parts.append(f"<p>Output:</p><pre>{e(log['output'])}</pre>")
            if log.get("error"):
                parts.append(f"<p class='error'>Error: {e(log['error'])}</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_grades_csv(path: Path, chapter: ChapterSpec, results: list[dict[str, Any]]) -> None:
    """Two tables of the same grades, one row per student sorted by id (every text cell through
    :func:`autograder.csvsafe.safe_cell`: a student id never runs as a spreadsheet formula).

    ``path`` (``grades.csv``): ``student_id, <exercise>..., total, max_total``.
    ``grades_long.csv`` beside it: ``student_id, exercise, points, max_points``, a row per
    student and exercise (the shape most LMS imports and spreadsheets pivot from).
    """
    rows = sorted(results, key=lambda r: r["student_id"])
    points = {(r["student_id"], ex.exercise_id):
              f"{r['exercises'].get(ex.exercise_id, {}).get('points', 0.0):g}"
              for r in rows for ex in chapter.exercises}
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["student_id", *[ex.name for ex in chapter.exercises], "total", "max_total"])
        for r in rows:
            w.writerow([r["student_id"],
                        *[points[r["student_id"], ex.exercise_id] for ex in chapter.exercises],
                        f"{r['total']:g}", f"{r['max_total']:g}"])
    with open(path.with_name("grades_long.csv"), "w", newline="", encoding="utf-8",
              errors="backslashreplace") as f:
        w = csvsafe.writer(f)
        w.writerow(["student_id", "exercise", "points", "max_points"])
        for r in rows:
            for ex in chapter.exercises:
                w.writerow([r["student_id"], ex.name, points[r["student_id"], ex.exercise_id],
                            f"{ex.points:g}"])


def write_report_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Every file seen: the student it was mapped to (or why not), status, reason, seconds
    (text cells through :func:`autograder.csvsafe.safe_cell`)."""
    cols = ["file", "student_id", "mapping", "status", "reason", "seconds"]
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csvsafe.dict_writer(f, cols)
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "") for c in cols})


def plot_distribution(path: Path, chapter: ChapterSpec, results: list[dict[str, Any]]) -> None:
    """One histogram of the points per exercise, plus the total, saved as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [(ex.name, ex.exercise_id, ex.points) for ex in chapter.exercises]
    panels.append(("total", None, chapter.max_total))
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, eid, maxp) in zip(axes.flat, panels):
        vals = [(r["total"] if eid is None else r["exercises"].get(eid, {}).get("points", 0.0))
                for r in results]
        bins = np.linspace(-0.5, maxp + 0.5, int(maxp) + 2) if maxp <= 20 else 20
        ax.hist(vals, bins=bins, color="#4c72b0", edgecolor="white")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("points")
        ax.set_xlim(-0.5, maxp + 0.5)
        if maxp <= 10:
            ax.set_xticks(range(int(maxp) + 1))
        ax.set_ylabel("students")
    fig.suptitle(f"{chapter.name}: score distribution ({len(results)} students)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_gradebook(db: Path, chapter_name: str, slug: str, chapter: ChapterSpec,
                    results: list[dict[str, Any]]) -> None:
    """Record every student's auto scores in nbgrader's gradebook (this process is its only writer)."""
    import warnings

    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{db}") as gb:
        warnings.simplefilter("ignore")
        gb.update_or_create_assignment(chapter_name)
        gb.update_or_create_notebook(slug, chapter_name)
        for ex in chapter.exercises:
            gb.update_or_create_grade_cell(ex.test_grade_id, slug, chapter_name,
                                           max_score=ex.points, cell_type="code")
            gb.update_or_create_solution_cell(ex.solution_grade_id, slug, chapter_name)
        for r in results:
            gb.update_or_create_student(r["student_id"])
            gb.update_or_create_submission(chapter_name, r["student_id"])
            for ex in chapter.exercises:
                grade = gb.find_grade(ex.test_grade_id, slug, chapter_name, r["student_id"])
                grade.auto_score = float(r["exercises"].get(ex.exercise_id, {}).get("points", 0.0))
            gb.db.commit()


_NUMBER = re.compile(r"-?\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b|\bnan\b|-?\binf\b", re.I)
_CASE_PREFIX = re.compile(r"^case \d+ \([^\n]*?\): ")
GRADED = ("graded", "graded (cached)")


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


def common_failures(chapter: ChapterSpec, results: list[dict[str, Any]],
                    top: int = 5) -> dict[str, list[tuple[str, int, str]]]:
    """Per exercise, the ``top`` most common failures: ``(kind, students, an example)``."""
    out: dict[str, list[tuple[str, int, str]]] = {}
    for ex in chapter.exercises:
        counts: dict[str, int] = {}
        example: dict[str, str] = {}
        for r in results:
            res = r.get("exercises", {}).get(ex.exercise_id, {})
            if r.get("status") != "graded" or res.get("status") == "passed":
                continue
            kinds = {}
            for m in res.get("messages", [])[:50]:
                kinds.setdefault(failure_kind(str(m)), str(m))
            for k, m in kinds.items():
                counts[k] = counts.get(k, 0) + 1
                example.setdefault(k, m)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        out[ex.exercise_id] = [(k, n, example[k]) for k, n in ranked]
    return out


def write_summary(path: Path, chapter: ChapterSpec, results: list[dict[str, Any]],
                  rows: list[dict[str, Any]], plot: Path | None = None,
                  similarity_flags: int | None = None, wall: float | None = None) -> None:
    """The instructor's one page: distribution, pass rates, common failures, ungradable files."""
    import base64
    import statistics

    e = html.escape
    graded = [r for r in results if r.get("status") == "graded"]
    totals = [float(r["total"]) for r in results]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(chapter.name)}: "
             f"grading summary</title><style>{_STYLE}</style></head><body>",
             f"<h1>{e(chapter.name)}: grading summary</h1>",
             f"<p>{len(results)} students in grades.csv ({len(graded)} graded, "
             f"{len(results) - len(graded)} could not be graded and count 0); "
             f"{sum(1 for row in rows if row.get('status') not in GRADED)} file(s) not graded"
             + (f"; wall time {wall:.0f} s" if wall is not None else "") + ".</p>",
             "<h2>Score distribution</h2>"]
    if totals:
        parts.append(f"<p>Total out of {chapter.max_total:g}: mean {statistics.mean(totals):.2f}, "
                     f"median {statistics.median(totals):g}, full marks "
                     f"{sum(t == chapter.max_total for t in totals)}, zero "
                     f"{sum(t == 0 for t in totals)}.</p>")
    if plot is not None and plot.exists():
        data = base64.b64encode(plot.read_bytes()).decode()
        parts.append(f"<img alt='histograms of the points of each exercise and of the total' "
                     f"src='data:image/png;base64,{data}' style='max-width:100%'>")
    parts.append("<h2>Exercises</h2><table><tr><th>exercise</th><th>points</th><th>passed</th>"
                 "<th>pass rate</th></tr>")
    for ex in chapter.exercises:
        passed = sum(1 for r in results
                     if r.get("exercises", {}).get(ex.exercise_id, {}).get("status") == "passed")
        rate = f"{passed / len(results):.0%}" if results else "-"
        parts.append(f"<tr><td>{e(ex.name)}</td><td>{ex.points:g}</td><td>{passed} / "
                     f"{len(results)}</td><td>{rate}</td></tr>")
    parts.append("</table><h2>What the class got wrong</h2>"
                 "<p>The most common failures of each exercise among the graded files (numbers "
                 "replaced by #), with the number of students and one message as a student read "
                 "it.</p>")
    failures = common_failures(chapter, results)
    for ex in chapter.exercises:
        common = failures.get(ex.exercise_id, [])
        parts.append(f"<h3>{e(ex.name)}</h3>")
        if not common:
            parts.append("<p class='passed'>No failures.</p>")
            continue
        parts.append("<table><tr><th>students</th><th>failure</th><th>for example</th></tr>")
        for kind, n, example in common:
            parts.append(f"<tr><td>{n}</td><td>{e(kind)}</td><td><pre>{e(example[:600])}</pre>"
                         "</td></tr>")
        parts.append("</table>")
    problems = [row for row in rows if row.get("status") not in GRADED]
    parts.append(f"<h2>Files that could not be graded ({len(problems)})</h2>")
    if problems:
        parts.append("<table><tr><th>file</th><th>student</th><th>status</th><th>why</th></tr>")
        for row in problems:
            parts.append(f"<tr><td><code>{e(str(row.get('file', '')))}</code></td>"
                         f"<td>{e(str(row.get('student_id', '')))}</td>"
                         f"<td>{e(str(row.get('status', '')))}</td>"
                         f"<td>{e(str(row.get('reason', '')))}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")
    if similarity_flags is not None:
        parts.append(f"<h2>Similarity</h2><p>{similarity_flags} flag(s) of solutions that look "
                     "copied (from a classmate or from course_lib): see <a href='similarity.html'>"
                     "similarity.html</a>. Grades are not changed by it.</p>")
    parts.append("</body></html>\n")
    path.write_text("\n".join(parts), encoding="utf-8", errors="backslashreplace")
