"""``python -m autograder release``: the student notebooks, from the instructor's sources.

``chapters/NN-slug/slug.ipynb`` is made from ``solutions/NN-slug/slug.ipynb`` by nbgrader's own
``generate_assignment`` (its Python API, in this process): solutions become stubs, hidden tests are
removed, cells are locked and checksummed. The converter runs in a throwaway course directory with
a throwaway gradebook; its output is then normalised (sorted JSON keys, one-space indent, no
outputs, the source's cell ids, a final newline) so the same source always gives the same bytes,
and ``check-release`` can tell when ``chapters/`` drifted.

Beside each release it writes the Colab copy, ``colab/NN-slug/slug.ipynb`` (plain Jupyter
markdown: see :mod:`autograder.colab`), which the website's Colab and download buttons open. Its
prose carries the numbers the website's build measured, committed in ``_data/measured/<slug>.json``
(:mod:`autograder.measured`; ``python -m autograder measure`` writes them from the executed book):
``check-release`` reports a Colab copy that does not carry the committed values, and a glued name
that has none.

The repository's address is defined once, as ``repository.url`` in ``_config.yml``; ``release``
writes it into every notebook's setup cell (``pip install "course-lib @ git+<url>"``) and into
``README.md``, and ``check-release`` reports any copy that differs.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import nbformat

import yaml

from autograder import colab, measured
from autograder.nbgrader_setup import nbgrader_config, setup_alembic
from autograder.paths import REPO, Chapter

#: A ``git+`` install URL of a GitHub repository, as setup cells and the README write it.
GIT_URL_RE = re.compile(r"git\+https://github\.com/[\w.\-]+/[\w.\-]+?(?=[\"'\s)@`]|\.git|$)")


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

    setup_alembic()
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


def repository_url(config: Path = REPO / "_config.yml") -> str:
    """The course repository's address, ``repository.url`` of ``_config.yml`` (defined there only)."""
    url = yaml.safe_load(config.read_text(encoding="utf-8")).get("repository", {}).get("url")
    if not url or not url.startswith("https://github.com/"):
        raise ReleaseError(f"{config}: repository.url must be a https://github.com/ address, "
                           f"got {url!r}")
    return url.rstrip("/")


def stamp_url(text: str, url: str) -> str:
    """``text`` with every ``git+https://github.com/...`` install URL replaced by ``git+<url>``.

    Example:
        >>> stamp_url('pip install "course-lib @ git+https://github.com/old/name"',
        ...           "https://github.com/new/repo")
        'pip install "course-lib @ git+https://github.com/new/repo"'
    """
    return GIT_URL_RE.sub(lambda _m: f"git+{url}", text)


def colab_root(chapter: Chapter) -> Path:
    """Where the Colab copies live: ``colab/`` beside the release root (``chapters/``)."""
    return chapter.release_root.parent / "colab"


def colab_release(chapter: Chapter, release_text: str) -> str:
    """The Colab copy (plain Jupyter markdown) of a release's text, normalised like the release,
    with the chapter's committed measured values in its prose."""
    site = colab.SiteConfig.load()
    refs = colab.load_references(sorted((REPO / "bib").glob("*.bib")))
    nb = json.loads(release_text)
    try:
        values = measured.load(chapter).values
        converted = colab.to_colab(nb, page_url=colab.page_url(site, chapter.name, chapter.slug),
                                   site=site, refs=refs, measured=values)
    except (colab.ColabConversionError, measured.MeasuredError) as err:
        raise ReleaseError(f"{chapter.name}: {err}") from err
    return normalise(nbformat.from_dict(converted))


def unmeasured(chapter: Chapter, release_text: str) -> str | None:
    """Why the chapter's Colab copy lacks numbers (glued names without a committed value), or None."""
    try:
        values = measured.load(chapter).values
    except measured.MeasuredError as err:
        raise ReleaseError(f"{chapter.name}: {err}") from err
    absent = colab.missing_values(json.loads(release_text), values)
    if not absent:
        return None
    return (f"{chapter.name}: {len(absent)} glued value(s) without a measured value in "
            f"{measured.measured_path(chapter)} ({', '.join(absent[:5])}"
            f"{', ...' if len(absent) > 5 else ''}): run `make release`, `make book`, "
            f"`python -m autograder measure {chapter.name}`, then `make release` again")


def _stamped_sources(chapters: list[Chapter]) -> dict[Path, str]:
    """The files holding the repository URL, with the URL as ``_config.yml`` defines it."""
    url = repository_url()
    files = [c.source for c in chapters if c.source.exists()]
    if any(c.source_root == REPO / "solutions" for c in chapters):
        files.append(REPO / "README.md")
    return {path: stamp_url(path.read_text(encoding="utf-8"), url) for path in files}


def release(chapters: list[Chapter], warn: Callable[[str], None] | None = None) -> list[Path]:
    """Write each chapter's release and Colab copy; return the paths written.

    ``warn`` (a function of one line) hears of each chapter whose Colab copy still names glued
    values because they have no committed measurement yet (:func:`unmeasured`)."""
    written = []
    for path, text in _stamped_sources(chapters).items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for chapter in chapters:
        text = generate_release(chapter)
        chapter.release.parent.mkdir(parents=True, exist_ok=True)
        chapter.release.write_text(text, encoding="utf-8")
        written.append(chapter.release)
        target = colab.colab_path(chapter.release, chapter.release_root, colab_root(chapter))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(colab_release(chapter, text), encoding="utf-8")
        written.append(target)
        why = unmeasured(chapter, text)
        if why and warn is not None:
            warn(why)
    return written


def check_release(chapters: list[Chapter]) -> list[str]:
    """Chapters whose committed release or Colab copy differs from what ``release`` would write
    (the committed measured values included), chapters with glued values that have no measured
    value, and files whose repository URL differs from ``_config.yml``'s, with why."""
    drifted = []
    for path, text in _stamped_sources(chapters).items():
        if path.read_text(encoding="utf-8") != text:
            drifted.append(f"{path.name}: its repository URL is not _config.yml's repository.url")
    for chapter in chapters:
        expected = generate_release(chapter)
        if not chapter.release.exists():
            drifted.append(f"{chapter.name}: {chapter.release} is missing")
        elif chapter.release.read_text(encoding="utf-8") != expected:
            drifted.append(f"{chapter.name}: {chapter.release} differs from the release of "
                           f"{chapter.source}")
        target = colab.colab_path(chapter.release, chapter.release_root, colab_root(chapter))
        if not target.exists():
            drifted.append(f"{chapter.name}: its Colab copy {target} is missing")
        elif target.read_text(encoding="utf-8") != colab_release(chapter, expected):
            drifted.append(f"{chapter.name}: {target} differs from the Colab copy of its release "
                           f"and {measured.measured_path(chapter).relative_to(chapter.release_root.parent)}")
        why = unmeasured(chapter, expected)
        if why:
            drifted.append(why)
    return drifted
