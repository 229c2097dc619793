"""Draw the course map: which chapter builds on which (``_figures/course-map.svg``).

The graph comes from ``_data/chapters.yml`` (``needs``). Chapters are placed in columns by depth
(a chapter sits one column right of the deepest chapter it needs). Arrows are the transitive
reduction of ``needs``: "3 needs 1" is not drawn when 3 needs 2 and 2 needs 1, because following
the arrows already says so. An arrow that skips columns arcs above the boxes it passes, higher
the more it skips. The SVG is written by hand, deterministically, so that a test can
check the committed file against the data (``--check``).

    python scripts/course_map.py           # write _figures/course-map.svg
    python scripts/course_map.py --check   # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "_data" / "chapters.yml"
OUT = ROOT / "_figures" / "course-map.svg"

BOX_W, BOX_H = 170, 54
GAP_X, GAP_Y = 60, 26
MARGIN = 20
ARC = 40  # height of the arc of an arrow that skips a column
# Okabe-Ito blue for the boxes' outline; black text: readable in greyscale and for every
# common colour-vision deficiency.
OUTLINE, FILL, INK = "#0072B2", "#EAF3FA", "#000000"


def depths(chapters: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Column of each chapter: 0 for a chapter that needs nothing, else 1 + its deepest need.

    >>> depths([{"slug": "a", "needs": []}, {"slug": "b", "needs": ["a"]},
    ...         {"slug": "c", "needs": ["a", "b"]}])
    {'a': 0, 'b': 1, 'c': 2}
    """
    column: dict[str, int] = {}
    for chapter in chapters:
        unknown = [s for s in chapter["needs"] if s not in column]
        if unknown:
            raise ValueError(f"{chapter['slug']} needs {unknown}, which are not earlier chapters")
        column[chapter["slug"]] = 1 + max((column[s] for s in chapter["needs"]), default=-1)
    return column


def direct_edges(chapters: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(needed, chapter)`` pairs not implied by a longer chain of needs.

    >>> direct_edges([{"slug": "a", "needs": []}, {"slug": "b", "needs": ["a"]},
    ...               {"slug": "c", "needs": ["a", "b"]}])
    [('a', 'b'), ('b', 'c')]
    """
    needs = {c["slug"]: set(c["needs"]) for c in chapters}

    def reachable(start: str) -> set[str]:
        seen, stack = set(), list(needs[start])
        while stack:
            slug = stack.pop()
            if slug not in seen:
                seen.add(slug)
                stack.extend(needs[slug])
        return seen

    return [(need, c["slug"]) for c in chapters for need in c["needs"]
            if not any(need in reachable(other) for other in c["needs"] if other != need)]


def layout(chapters: Sequence[dict[str, Any]], top: int = MARGIN) -> dict[str, tuple[int, int]]:
    """Top-left corner of each chapter's box (the first row at ``top``)."""
    column = depths(chapters)
    rows: dict[int, int] = {}
    corner = {}
    for chapter in chapters:
        c = column[chapter["slug"]]
        r = rows.get(c, 0)
        rows[c] = r + 1
        corner[chapter["slug"]] = (MARGIN + c * (BOX_W + GAP_X), top + r * (BOX_H + GAP_Y))
    return corner


def svg(chapters: Sequence[dict[str, Any]]) -> str:
    """The map as an SVG document (a title and a description for screen readers included)."""
    column = depths(chapters)
    edges = direct_edges(chapters)
    arcs = any(column[b] - column[a] > 1 for a, b in edges)
    corner = layout(chapters, MARGIN + (ARC if arcs else 0))
    width = max(x for x, _ in corner.values()) + BOX_W + MARGIN
    height = max(y for _, y in corner.values()) + BOX_H + MARGIN
    numbers = {c["slug"]: int(c["slug"].split("-", 1)[0]) for c in chapters}
    described = "; ".join(f"chapter {numbers[c['slug']]} builds on chapter"
                          f"{'s' if len(c['needs']) > 1 else ''} "
                          f"{', '.join(str(numbers[n]) for n in c['needs'])}"
                          for c in chapters if c["needs"])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="title desc">',
           '<title id="title">Course map: which chapter builds on which</title>',
           f'<desc id="desc">{escape(described or "the chapters are independent")}.</desc>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
           f'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
           f'fill="{INK}"/></marker></defs>',
           '<g fill="none" stroke="#000000" stroke-width="1.5">']
    for a, b in edges:
        (ax, ay), (bx, by) = corner[a], corner[b]
        if column[b] - column[a] == 1 or ay != by:
            out.append(f'<path d="M {ax + BOX_W} {ay + BOX_H // 2} L {bx} {by + BOX_H // 2}" '
                       'marker-end="url(#arrow)"/>')
        else:  # skips a column on the same row: arc over the boxes in between
            span = column[b] - column[a]
            x0, x1, top = ax + BOX_W // 2, bx + BOX_W // 2, ay - min(ARC - 4, 12 * span)
            out.append(f'<path d="M {x0} {ay} C {x0} {top}, {x1} {top}, {x1} {by}" '
                       'stroke-dasharray="6 3" marker-end="url(#arrow)"/>')
    out.append('</g>')
    for chapter in chapters:
        x, y = corner[chapter["slug"]]
        out.append(f'<g><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" '
                   f'fill="{FILL}" stroke="{OUTLINE}" stroke-width="2"/>'
                   f'<text x="{x + BOX_W // 2}" y="{y + 22}" text-anchor="middle" '
                   f'font-family="sans-serif" font-size="13" font-weight="bold" fill="{INK}">'
                   f'Chapter {numbers[chapter["slug"]]}</text>'
                   f'<text x="{x + BOX_W // 2}" y="{y + 41}" text-anchor="middle" '
                   f'font-family="sans-serif" font-size="13" fill="{INK}">'
                   f'{escape(chapter["short"])}</text></g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed map is stale")
    args = parser.parse_args(argv)
    drawn = svg(yaml.safe_load(DATA.read_text(encoding="utf-8")))
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != drawn:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/course_map.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(drawn, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
