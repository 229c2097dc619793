"""The score distribution: a histogram of the points of each exercise and of the total.

Drawn with matplotlib's object API (:class:`matplotlib.figure.Figure`), so no backend or global
state of pyplot is touched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from autograder.chapter_spec import ChapterSpec
from autograder.results import GradeResult


def _values(results: list[GradeResult], exercise_id: str | None) -> list[float]:
    """Each student's points on one exercise (``None``: the total)."""
    if exercise_id is None:
        return [r.total for r in results]
    return [o.points if (o := r.exercises.get(exercise_id)) is not None else 0.0 for r in results]


def plot_distribution(path: Path, chapter: ChapterSpec, results: list[GradeResult]) -> None:
    """One histogram of the points per exercise, plus the total, saved as a PNG at ``path``."""
    panels: list[tuple[str, str | None, float]] = [
        (ex.name, ex.exercise_id, ex.points) for ex in chapter.exercises]
    panels.append(("total", None, chapter.max_total))
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, eid, maxp) in zip(axes.flat, panels):
        bins = np.linspace(-0.5, maxp + 0.5, int(maxp) + 2) if maxp <= 20 else 20
        ax.hist(_values(results, eid), bins=bins, color="#4c72b0", edgecolor="white")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("points")
        ax.set_xlim(-0.5, maxp + 0.5)
        if maxp <= 10:
            ax.set_xticks(range(int(maxp) + 1))
        ax.set_ylabel("students")
    fig.suptitle(f"{chapter.name}: score distribution ({len(results)} students)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
