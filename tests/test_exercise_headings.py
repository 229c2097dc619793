"""Exercise numbers and points are right wherever a chapter writes them (issue 30, item 2).

Points live in one place, the test cell's nbgrader metadata (AUTHORING.md, rule 2); the
statement repeats them in its heading, ``### Exercise k: name (P points)``, and the prose refers
to exercises by number. Checked on every source notebook found by glob:

- each statement (the markdown cell just before a solution cell) has exactly one such heading
  (the points may be followed by the kind, ``(1 point, a warm-up)``),
  whose ``k`` is the exercise's 1-based position in notebook order, whose ``name`` is the
  solution cell's ``grade_id`` and whose ``P`` is the points of the test cell ``<name>_test``;
- no other markdown cell carries an exercise heading;
- every other "exercise N" / "Exercises N, M and K" in the markdown names an existing number.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from coursebook.chapters import all_chapters

CHAPTERS = all_chapters()

HEADING = re.compile(r"^###\s+Exercise\b(.*)$", re.MULTILINE)
# "(2 points)"; a chapter may add the kind after a comma: "(1 point, a warm-up)"
HEADING_FORM = re.compile(r"^\s+(\d+):\s+`?(\w+)`?\s+\((\d+)\s+(points?)(?:,[^()]*)?\)\s*$")
# "exercise 5", "Exercises 5, 6, 7 and 10", "exercises 1 to 3", "exercise 7's"
MENTION = re.compile(r"\b[Ee]xercises?\s+(\d+(?:\s*(?:,|and|or|to|-|–)\s*\d+)*)")


def _exercises(nb) -> tuple[list[tuple[int, str]], dict[str, object]]:
    """(statement cell index, grade_id) of each solution cell in order; points by test grade_id."""
    solutions, points = [], {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            solutions.append((i - 1, meta.get("grade_id")))
        elif meta.get("grade") and "grade_id" in meta:
            points[meta["grade_id"]] = meta.get("points")
    return solutions, points


def _heading_errors(nb) -> list[str]:
    solutions, points = _exercises(nb)
    errors = []
    statement_cells = set()
    for k, (i, name) in enumerate(solutions, start=1):
        statement_cells.add(i)
        cell = nb.cells[i] if i >= 0 else None
        if cell is None or cell.cell_type != "markdown":
            errors.append(f"exercise {k} ({name}): no statement cell before its solution cell")
            continue
        headings = HEADING.findall(cell.source)
        if len(headings) != 1:
            errors.append(f"exercise {k} ({name}): {len(headings)} '### Exercise' headings in "
                          f"its statement (cell {i}), want 1")
            continue
        form = HEADING_FORM.match(headings[0])
        if form is None:
            errors.append(f"exercise {k} ({name}): heading '### Exercise{headings[0]}' is not "
                          "'### Exercise k: name (P points)'")
            continue
        number, title, stated, unit = int(form[1]), form[2], int(form[3]), form[4]
        graded = points.get(f"{name}_test")
        if number != k:
            errors.append(f"exercise {k} ({name}): its heading numbers it {number}")
        if title != name:
            errors.append(f"exercise {k} ({name}): its heading names it {title!r}")
        if graded is None or stated != graded:
            errors.append(f"exercise {k} ({name}): its heading says {stated} {unit}, the test "
                          f"cell {name}_test grades {graded}")
        elif unit != ("point" if stated == 1 else "points"):
            errors.append(f"exercise {k} ({name}): '{stated} {unit}'")
    for i, cell in enumerate(nb.cells):
        stray = HEADING.search(cell.source) if cell.cell_type == "markdown" else None
        if stray is not None and i not in statement_cells:
            errors.append(f"cell {i}: an '### Exercise' heading outside a statement: {stray[0]!r}")
    return errors


def _mention_errors(nb) -> list[str]:
    solutions, _ = _exercises(nb)
    count = len(solutions)
    errors = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        text = HEADING.sub("", cell.source)
        for match in MENTION.finditer(text):
            for number in map(int, re.findall(r"\d+", match[1])):
                if not 1 <= number <= count:
                    errors.append(f"cell {i}: {match[0]!r} names exercise {number}; the chapter "
                                  f"has {count}")
    return errors


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_exercise_headings_match_the_grading(chapter) -> None:
    nb = nbformat.read(chapter.source, as_version=4)
    errors = _heading_errors(nb)
    assert not errors, f"{chapter.slug}:\n" + "\n".join(errors)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_exercise_mentions_name_existing_exercises(chapter) -> None:
    nb = nbformat.read(chapter.source, as_version=4)
    errors = _mention_errors(nb)
    assert not errors, f"{chapter.slug}:\n" + "\n".join(errors)


def _notebook(cells: list[tuple[str, str, dict]]):
    nb = nbformat.v4.new_notebook()
    for kind, source, meta in cells:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(make(source, metadata={"nbgrader": meta} if meta else {}))
    return nb


def _chapter(heading: str, points: int = 2, prose: str = "See exercise 1.") -> object:
    return _notebook([
        ("markdown", prose, {}),
        ("markdown", f"### {heading}\n\nWrite it.", {}),
        ("code", "def f():\n    pass", {"solution": True, "grade": False, "grade_id": "f"}),
        ("code", "f()", {"solution": False, "grade": True, "grade_id": "f_test",
                         "points": points}),
    ])


@pytest.mark.parametrize("heading, points, wrong", [
    ("Exercise 1: f (2 points)", 2, None),
    ("Exercise 1: f (1 point)", 1, None),
    ("Exercise 1: f (1 point, a warm-up)", 1, None),
    ("Exercise 1: f (2 point, a warm-up)", 2, "'2 point'"),
    ("Exercise 2: f (2 points)", 2, "numbers it 2"),
    ("Exercise 1: g (2 points)", 2, "names it 'g'"),
    ("Exercise 1: f (3 points)", 2, "grades 2"),
    ("Exercise 1: f (1 points)", 1, "'1 points'"),
    ("Exercise 1 f", 2, "is not"),
])
def test_the_check_catches_a_stale_heading(heading, points, wrong) -> None:
    errors = _heading_errors(_chapter(heading, points))
    if wrong is None:
        assert errors == []
    else:
        assert len(errors) == 1 and wrong in errors[0], errors


@pytest.mark.parametrize("prose, wrong", [
    ("As exercise 1 shows.", None),
    ("Exercises 1 and 2 ask for a derivation.", 2),
    ("as exercise 7 predicts", 7),
    ("Exercises 1, 1 or 3 (4 points)", 3),
])
def test_the_check_catches_a_mention_of_no_exercise(prose, wrong) -> None:
    errors = _mention_errors(_chapter("Exercise 1: f (2 points)", prose=prose))
    if wrong is None:
        assert errors == []
    else:
        assert len(errors) == 1 and f"names exercise {wrong}" in errors[0], errors
