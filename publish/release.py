"""``python -m publish release``: the student notebooks, from the instructor's sources.

``chapters/<slug>/<stem>.ipynb`` is made from ``solutions/<slug>/<stem>.ipynb`` by nbgrader's own
``generate_assignment`` (its Python API, in this process): solutions become stubs, hidden tests are
removed, cells are locked and checksummed. The converter runs in a throwaway course directory with
a throwaway gradebook (:mod:`autograder.nbgrader_setup`); its output is then normalised (nbformat
4.5, no outputs, the source's cell ids) and written by :func:`coursebook.notebooks.write`, one
source line per line, so the same source always gives the same bytes and ``python -m publish check``
(:mod:`publish.drift`) can tell when ``chapters/`` drifted.

Beside each release it writes the Colab copy, ``colab/<slug>/<stem>.ipynb`` (plain Jupyter
markdown: see :mod:`publish.colab`), which the website's Colab and download buttons open. Its prose
carries the numbers the website's build measured, committed in ``_data/measured/<stem>.json``
(:mod:`publish.measured`; ``python -m publish measure`` writes them from the executed book).

Release writes generated files only. The repository's address is defined once, as
``repository.url`` in ``_config.yml``; the sources' setup cells and ``README.md`` repeat it, and
when one of them names another address release fails before writing anything, naming each file
and line to edit (:func:`publish.repository.check_urls`).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from autograder.nbgrader_setup import nbgrader_config, setup_alembic
from coursebook import Chapter, notebooks
from publish import colab, measured
from publish.errors import ReleaseError
from publish.repository import check_urls
from publish.site import SITE, Site


def _deterministic_id(index: int, cell: NotebookNode) -> str:
    """An id for a cell that has none, the same for the same place, type and source."""
    digest = hashlib.sha1(f"{index}:{cell.get('cell_type')}:{cell.get('source')}".encode())
    return digest.hexdigest()[:12]


def normalise(nb: NotebookNode) -> NotebookNode:
    """``nb`` as a generated notebook stores it (changed in place and returned): nbformat 4.5,
    every cell with an id, no outputs or execution counts, no execution or widget metadata."""
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
    return nb


def _nbgrader_release(source: Path, assignment: str, root: Path) -> NotebookNode:
    """Run nbgrader's generate_assignment on ``source`` in the course directory ``root``."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    src_dir = root / "source" / assignment
    src_dir.mkdir(parents=True)
    shutil.copyfile(source, src_dir / source.name)
    config = nbgrader_config(root)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    result = api.generate_assignment(assignment, force=True, create=True)
    out = root / "release" / assignment / source.name
    if not result.get("success") or not out.exists():
        detail = (result.get("error") or result.get("log") or "no output").strip()
        raise ReleaseError(f"{assignment}: nbgrader generate_assignment failed:\n{detail}")
    return notebooks.read(out)


def generate_release(source: Path, assignment: str) -> NotebookNode:
    """The student release of the instructor's notebook ``source``, normalised.

    Args:
        source: ``solutions/<slug>/<stem>.ipynb``.
        assignment: nbgrader's assignment id, the chapter's slug (``"01-seq2seq"``).

    Returns:
        The release; :func:`coursebook.notebooks.dumps` gives the bytes ``release`` writes.

    Raises:
        ReleaseError: the source is missing, or nbgrader refused it (the message is nbgrader's).
    """
    setup_alembic()
    if not source.exists():
        raise ReleaseError(f"{assignment}: no source notebook {source}")
    with tempfile.TemporaryDirectory(prefix="publish-release-") as tmp:
        nb = _nbgrader_release(source, assignment, Path(tmp))
    # nbgrader keeps cell ids; restore any it dropped from the source, in order.
    original = notebooks.read(source)
    if len(original.cells) == len(nb.cells):
        for s, r in zip(original.cells, nb.cells):
            if s.get("id") and not r.get("id"):
                r["id"] = s["id"]
    return normalise(nb)


def colab_copy(chapter: Chapter, release: NotebookNode, site: Site = SITE) -> NotebookNode:
    """The Colab copy (plain Jupyter markdown) of the chapter's release, normalised like it, with
    the chapter's committed measured values in its prose.

    Raises:
        ReleaseError: naming the chapter: the conversion failed or the measured file is malformed.
    """
    config = colab.SiteConfig.load(site.config)
    refs = colab.load_references(site.bib_files())
    try:
        values = measured.load(chapter).values
        converted = colab.to_colab(release, page_url=colab.page_url(config, chapter), site=config,
                                   refs=refs, measured=values)
    except (colab.ColabConversionError, measured.MeasuredError) as err:
        raise ReleaseError(f"{chapter.slug}: {err}") from err
    return normalise(nbformat.from_dict(converted))


def unmeasured(chapter: Chapter, release: NotebookNode) -> str | None:
    """Why the chapter's Colab copy lacks numbers (glued names without a committed value), or None.

    Raises:
        ReleaseError: the chapter's measured-values file is malformed.
    """
    try:
        values = measured.load(chapter).values
    except measured.MeasuredError as err:
        raise ReleaseError(f"{chapter.slug}: {err}") from err
    absent = colab.missing_values(release, values)
    if not absent:
        return None
    return (f"{chapter.slug}: {len(absent)} glued value(s) without a measured value in "
            f"{chapter.measured} ({', '.join(absent[:5])}{', ...' if len(absent) > 5 else ''}): "
            f"run `make release`, `make book`, `python -m publish measure {chapter.slug}`, "
            f"then `make release` again")


def hand_edited(chapters: list[Chapter], site: Site = SITE) -> list[Path]:
    """The hand-edited files that repeat the repository's address: the chapters' sources and the
    site's README (when there is one)."""
    files = [c.source for c in chapters if c.source.exists()]
    return files + ([site.readme] if site.readme.exists() else [])


def release(chapters: list[Chapter], site: Site = SITE,
            warn: Callable[[str], None] | None = None) -> list[Path]:
    """Write each chapter's release and Colab copy; return the paths whose bytes changed.

    Nothing is written when a hand-edited file names another repository (:func:`hand_edited`).

    Args:
        chapters: the chapters to publish (their ``release`` and ``colab`` paths are written).
        site: where ``_config.yml``, ``bib/`` and ``README.md`` are read.
        warn: hears of each chapter whose Colab copy still names glued values because they have
            no committed measurement yet (:func:`unmeasured`), one line each.

    Raises:
        ReleaseError: a stale repository address (naming each file and line), or a chapter that
            cannot be released (naming it).
    """
    check_urls(hand_edited(chapters, site), site.config)
    written = []
    for chapter in chapters:
        nb = generate_release(chapter.source, chapter.slug)
        if notebooks.write(nb, chapter.release):
            written.append(chapter.release)
        if notebooks.write(colab_copy(chapter, nb, site), chapter.colab):
            written.append(chapter.colab)
        why = unmeasured(chapter, nb)
        if why and warn is not None:
            warn(why)
    return written
