"""``python -m autograder release``: the student notebooks, from the instructor's sources.

``chapters/NN-slug/slug.ipynb`` is made from ``solutions/NN-slug/slug.ipynb`` by nbgrader's own
``generate_assignment`` (its Python API, in this process): solutions become stubs, hidden tests are
removed, cells are locked and checksummed. The converter runs in a throwaway course directory with
a throwaway gradebook; its output is then normalised (sorted JSON keys, one-space indent, no
outputs, the source's cell ids, a final newline) so the same source always gives the same bytes,
and ``check-release`` can tell when ``chapters/`` drifted.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import nbformat

from autograder.nbgrader_setup import ensure_venv_on_path, nbgrader_config
from autograder.paths import Chapter


class ReleaseError(RuntimeError):
    """nbgrader refused to generate the release (bad metadata, duplicate grade ids...)."""


def _deterministic_id(index: int, cell: dict) -> str:
    digest = hashlib.sha1(f"{index}:{cell.get('cell_type')}:{cell.get('source')}".encode())
    return digest.hexdigest()[:12]


def normalise(nb: nbformat.NotebookNode) -> str:
    """The canonical text of a released notebook: nbformat 4.5, no outputs, stable ids and keys."""
    nb.nbformat, nb.nbformat_minor = 4, 5
    for i, cell in enumerate(nb.cells):
        if not cell.get("id"):
            cell["id"] = _deterministic_id(i, cell)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    nbformat.validate(nb)
    text = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False)
    return text + "\n"


def generate_release(chapter: Chapter) -> str:
    """Run nbgrader's generate_assignment on the chapter's source; return the release's text."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    ensure_venv_on_path()
    if not chapter.source.exists():
        raise ReleaseError(f"{chapter.name}: no source notebook {chapter.source}")
    with tempfile.TemporaryDirectory(prefix="autograder-release-") as tmp:
        root = Path(tmp)
        src_dir = root / "source" / chapter.name
        src_dir.mkdir(parents=True)
        shutil.copyfile(chapter.source, src_dir / chapter.source.name)
        config = nbgrader_config(root)
        coursedir = CourseDirectory(config=config)
        api = NbGraderAPI(coursedir=coursedir, config=config)
        result = api.generate_assignment(chapter.name, force=True, create=True)
        out = root / "release" / chapter.name / chapter.source.name
        if not result.get("success") or not out.exists():
            detail = (result.get("error") or result.get("log") or "no output").strip()
            raise ReleaseError(f"{chapter.name}: nbgrader generate_assignment failed:\n{detail}")
        nb = nbformat.read(out, as_version=4)
    # nbgrader keeps cell ids; restore any it dropped from the source, in order.
    source = nbformat.read(chapter.source, as_version=4)
    if len(source.cells) == len(nb.cells):
        for s, r in zip(source.cells, nb.cells):
            if s.get("id") and not r.get("id"):
                r["id"] = s["id"]
    return normalise(nb)


def release(chapters: list[Chapter]) -> list[Path]:
    """Write each chapter's release; return the paths written."""
    written = []
    for chapter in chapters:
        text = generate_release(chapter)
        chapter.release.parent.mkdir(parents=True, exist_ok=True)
        chapter.release.write_text(text, encoding="utf-8")
        written.append(chapter.release)
    return written


def check_release(chapters: list[Chapter]) -> list[str]:
    """Chapters whose committed release differs from what ``release`` would write, with why."""
    drifted = []
    for chapter in chapters:
        expected = generate_release(chapter)
        if not chapter.release.exists():
            drifted.append(f"{chapter.name}: {chapter.release} is missing")
        elif chapter.release.read_text(encoding="utf-8") != expected:
            drifted.append(f"{chapter.name}: {chapter.release} differs from the release of "
                           f"{chapter.source}")
    return drifted
