"""The course website's own Sphinx extension (registered in _config.yml,
``sphinx.local_extensions``).

What it adds to Jupyter Book / sphinx-book-theme:

* **Launch and download buttons open the Colab copy.** A chapter page is rendered from the MyST
  release ``chapters/NN-slug/slug.ipynb``, but Colab and a downloaded notebook need the plain
  Jupyter copy ``colab/NN-slug/slug.ipynb`` (written by ``python -m publish release``). The
  theme points its Colab button at the page's own source and serves that source as the download;
  here the Colab button is pointed at ``colab/...`` on the same repository and branch, and the
  served ``_sources/chapters/NN-slug/slug.ipynb`` is replaced by the Colab copy when the build
  finishes. A chapter page without its Colab copy fails the build before anything executes.
* **The course map** (``{course-map}`` directive, on the landing page): one row per chapter of
  ``_data/chapters.yml`` with the chapters it builds on, what its experiment shows, a thumbnail of
  its main figure (taken from the executed chapter), and how long it ran on a CPU and on a GPU.
* **The run times** (``{course-runtimes}`` directive): the execution time of each chapter recorded
  by this build's executions (jupyter-cache, through myst-nb), beside the GPU times recorded in
  ``_data/gpu_runtimes.json`` by ``scripts/record_gpu_runtimes.py``.
* **A link to the notation page** at the first mathematical symbol of each chapter page.
* **Alt text for every figure** of a chapter, from the cell's metadata (``"mystnb": {"image":
  {"alt": ...}}``), with ``{glue:NAME}`` or ``{glue:NAME:FORMAT}`` filled with the value the
  chapter's executed run glued (as the prose's ``{glue:text}`NAME:FORMAT``` shows it). A figure
  without its own alt text is a build warning (an error under ``--warningiserror``) naming the
  chapter, section and cell; a name the chapter did not glue is a build error.
* **Every bib/*.bib is read** (``bibtex_bibfiles`` plus the files it does not list), so the
  bibliography page (``:all:``) is the whole course's.

Accessibility, the phone layout and the pages' weight are the companion extension's
(``_ext/course_pages.py``).

The functions above the Sphinx hooks take plain values and are unit-tested in tests/test_site.py
without a build.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

LOGGER = logging.getLogger(__name__)

#: Cell tag that marks a chapter's main figure (wins over ``main_figure`` in chapters.yml).
MAIN_FIGURE_TAG = "main-figure"
#: The command that writes the Colab copies (named in error messages).
RELEASE_COMMAND = "python -m publish release"


# ---------------------------------------------------------------------------------------------
# Plain logic (no Sphinx objects): unit-tested without a build.
# ---------------------------------------------------------------------------------------------

def colab_copy(source: PurePosixPath, release_dir: str = "chapters",
               colab_dir: str = "colab") -> PurePosixPath | None:
    """The Colab copy of a page's source (paths relative to the repository), or None.

    >>> colab_copy(PurePosixPath("chapters/01-seq2seq/seq2seq.ipynb"))
    PurePosixPath('colab/01-seq2seq/seq2seq.ipynb')
    >>> colab_copy(PurePosixPath("intro.md")) is None
    True
    """
    if source.suffix != ".ipynb" or not source.parts or source.parts[0] != release_dir:
        return None
    return PurePosixPath(colab_dir, *source.parts[1:])


def missing_colab_copies(root: Path, sources: Iterable[PurePosixPath],
                         release_dir: str = "chapters",
                         colab_dir: str = "colab") -> list[str]:
    """The Colab copies (repository-relative) that chapter pages need and ``root`` lacks."""
    missing = []
    for source in sorted(sources):
        copy = colab_copy(source, release_dir, colab_dir)
        if copy is not None and not (root / copy).is_file():
            missing.append(str(copy))
    return missing


def colab_launch_url(colab_url: str, org: str, repo: str, branch: str,
                     notebook: PurePosixPath) -> str:
    """Colab's URL that opens ``notebook`` (repository-relative) from GitHub.

    >>> colab_launch_url("https://colab.research.google.com/", "o", "r", "main",
    ...                  PurePosixPath("colab/01-x/x.ipynb"))
    'https://colab.research.google.com/github/o/r/blob/main/colab/01-x/x.ipynb'
    """
    return f"{colab_url.rstrip('/')}/github/{org}/{repo}/blob/{branch}/{notebook}"


@dataclass(frozen=True)
class ChapterEntry:
    """One chapter of the course map (``_data/chapters.yml``)."""

    slug: str
    short: str
    needs: tuple[str, ...]
    experiment: str
    main_figure: str
    figure_alt: str

    @property
    def number(self) -> int:
        return int(self.slug.split("-", 1)[0])


_CHAPTER_FIELDS = ("slug", "short", "needs", "experiment", "main_figure", "figure_alt")


def parse_chapters(data: Any, toc_slugs: Sequence[str], where: str = "_data/chapters.yml"
                   ) -> list[ChapterEntry]:
    """Validate the course map against the chapters of the table of contents.

    Every chapter of ``toc_slugs`` has exactly one entry, in the same order; ``needs`` names only
    earlier chapters; every field is present and non-empty (``needs`` may be empty).
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list of chapters, got {type(data).__name__}")
    entries = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"{where}: entry {i + 1} is not a mapping")
        unknown = sorted(set(item) - set(_CHAPTER_FIELDS))
        absent = [f for f in _CHAPTER_FIELDS if f not in item or (f != "needs" and not item[f])]
        if unknown or absent:
            raise ValueError(f"{where}: entry {i + 1} ({item.get('slug', '?')}): "
                             f"missing or empty {absent}, unknown {unknown}")
        if not isinstance(item["needs"], list):
            raise ValueError(f"{where}: {item['slug']}: needs must be a list of slugs")
        entries.append(ChapterEntry(str(item["slug"]), str(item["short"]),
                                    tuple(str(s) for s in item["needs"]),
                                    " ".join(str(item["experiment"]).split()),
                                    str(item["main_figure"]),
                                    " ".join(str(item["figure_alt"]).split())))
    slugs = [e.slug for e in entries]
    if slugs != list(toc_slugs):
        raise ValueError(f"{where} lists chapters {slugs} but _toc.yml has {list(toc_slugs)}: "
                         "one entry per chapter page, in the order of _toc.yml")
    for i, entry in enumerate(entries):
        later = [s for s in entry.needs if s not in slugs[:i]]
        if later:
            raise ValueError(f"{where}: {entry.slug} needs {later}, which are not earlier chapters")
    return entries


@dataclass(frozen=True)
class GpuRun:
    """A chapter's execution time recorded on a GPU (``_data/gpu_runtimes.json``)."""

    seconds: float
    device: str
    date: str
    notebook_sha256: str


def parse_gpu_runtimes(data: Any, where: str = "_data/gpu_runtimes.json") -> dict[str, GpuRun]:
    """``{slug: GpuRun}`` from the JSON that ``scripts/record_gpu_runtimes.py`` writes."""
    if not isinstance(data, dict) or not isinstance(data.get("chapters"), dict):
        raise ValueError(f"{where}: expected an object with a 'chapters' object")
    runs = {}
    for slug, run in data["chapters"].items():
        try:
            runs[slug] = GpuRun(float(run["seconds"]), str(run["device"]), str(run["date"]),
                                str(run["notebook_sha256"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: chapter {slug}: needs seconds, device, date and "
                             f"notebook_sha256 ({err!r})") from err
        if not runs[slug].seconds > 0:
            raise ValueError(f"{where}: chapter {slug}: seconds must be positive")
    return runs


def every_bibfile(listed: Sequence[str], root: Path, folder: str = "bib") -> list[str]:
    """``listed`` followed by every other ``<folder>/*.bib`` under ``root`` (sorted)."""
    found = sorted(p.relative_to(root).as_posix() for p in (root / folder).glob("*.bib"))
    return list(listed) + [f for f in found if f not in listed]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def format_seconds(seconds: float) -> str:
    """``"47 s"``, ``"2 min 05 s"``.

    >>> format_seconds(47.4), format_seconds(125.2), format_seconds(0.4)
    ('47 s', '2 min 05 s', '0.4 s')
    """
    if seconds < 1:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60:02d} s"


NOT_EXECUTED = "not executed by this build (execution is off or failed)"
NO_GPU_RUN = "no GPU run recorded yet"


def cpu_cell(exec_data: Mapping[str, Any] | None) -> str:
    """The CPU column: this build's recorded execution time, or why there is none."""
    if not exec_data or not exec_data.get("succeeded") or exec_data.get("runtime") is None:
        return NOT_EXECUTED
    return format_seconds(float(exec_data["runtime"]))


def gpu_cell(run: GpuRun | None, current_sha256: str) -> str:
    """The GPU column: the recorded time and device, flagged when the notebook changed since."""
    if run is None:
        return NO_GPU_RUN
    text = f"{format_seconds(run.seconds)} ({run.device}, {run.date})"
    if run.notebook_sha256 != current_sha256:
        text += ", recorded for an earlier version of the chapter"
    return text


# ---------------------------------------------------------------------------------------------
# Sphinx: configuration, chapter pages, and the Colab copies.
# ---------------------------------------------------------------------------------------------

def _srcdir(app: Sphinx) -> Path:
    return Path(app.srcdir)


def _source_of(app: Sphinx, docname: str) -> PurePosixPath:
    return PurePosixPath(Path(app.env.doc2path(docname)).relative_to(_srcdir(app)).as_posix())


def _chapter_docs(app: Sphinx, docnames: Iterable[str]) -> dict[str, PurePosixPath]:
    """``{docname: colab copy}`` for the chapter pages among ``docnames``."""
    found = {}
    for docname in docnames:
        copy = colab_copy(_source_of(app, docname), app.config.course_release_dir,
                          app.config.course_colab_dir)
        if copy is not None:
            found[docname] = copy
    return found


def _slug(docname: str) -> str:
    return PurePosixPath(docname).parent.name


def read_every_bibfile(app: Sphinx, config: Any) -> None:
    """The bibliography page lists the whole course: read every bib/*.bib, listed or not."""
    config.bibtex_bibfiles = every_bibfile(config.bibtex_bibfiles, _srcdir(app))


def check_colab_copies(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Before reading (and executing) anything: every chapter page has its Colab copy."""
    if app.builder.format != "html":
        return
    sources = [_source_of(app, d) for d in env.found_docs]
    missing = missing_colab_copies(_srcdir(app), sources, app.config.course_release_dir,
                                   app.config.course_colab_dir)
    if missing:
        raise ExtensionError(
            "course_site: the Colab copies that the chapter pages' Colab and download buttons "
            f"open are missing: {', '.join(missing)}. Write them with `{RELEASE_COMMAND} "
            "<NN-slug>` (publish/colab.py converts the release to plain Jupyter).")


def point_buttons_at_colab_copy(app: Sphinx, pagename: str, templatename: str,
                                context: dict[str, Any], doctree: Any) -> None:
    """Runs after the theme's button builders: Colab opens, and .ipynb downloads, the Colab copy."""
    chapter = _chapter_docs(app, [pagename]) if pagename in app.env.found_docs else {}
    if not chapter:
        return
    copy = chapter[pagename]
    theme = app.config.html_theme_options
    colab_url = theme.get("launch_buttons", {}).get("colab_url")
    org, repo = context.get("github_user"), context.get("github_repo")
    if not colab_url or not org or not repo:
        raise ExtensionError("course_site: chapter pages need launch_buttons.colab_url and a "
                             "GitHub repository.url in _config.yml")
    url = colab_launch_url(colab_url, org, repo, theme.get("repository_branch") or "main", copy)
    found = {"colab": False, "download": False}
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []):
            if group.get("label") == "launch-buttons" and button.get("text") == "Colab":
                button["url"] = url
                found["colab"] = True
            if (group.get("label") == "download-buttons"
                    and button.get("label") == "download-source-button"):
                button["tooltip"] = "Download the notebook (plain Jupyter, as Colab opens it)"
                found["download"] = True
    if not all(found.values()):
        raise ExtensionError(f"course_site: {pagename}: the theme made no "
                             f"{[k for k, v in found.items() if not v]} button to redirect")


def drop_duplicate_scripts(app: Sphinx, pagename: str, templatename: str,
                           context: dict[str, Any], doctree: Any) -> None:
    """Each script once per page.

    With Jupyter Book 1.0.4, sphinx-thebe 0.3.1 and Sphinx 7.4, thebe's inline configuration
    (``const THEBE_JS_URL = ...``) reaches every page twice (once with filename None, once with
    ""), and the second copy is a SyntaxError in the reader's console. Keep the first of scripts
    with the same file and attributes.
    """
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (str(getattr(script, "filename", script) or ""),
               tuple(sorted((k, str(v)) for k, v in getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def serve_colab_copies(app: Sphinx, exception: Exception | None) -> None:
    """The download button serves ``_sources/<page>.ipynb``: make that file the Colab copy."""
    if exception is not None or app.builder.format != "html":
        return
    for docname, copy in _chapter_docs(app, app.env.found_docs).items():
        served = Path(app.outdir) / "_sources" / _source_of(app, docname)
        served.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_srcdir(app) / copy, served)


def redirect_page(target: str, title: str, favicon: str | None) -> str:
    """The site's ``index.html`` when the root page has another name: a redirect a browser and a
    reader both follow (with the site's icon, so the browser does not ask for /favicon.ico).

    >>> print(redirect_page("intro.html", "A & B", None).splitlines()[3])
    <title>A &amp; B</title>
    """
    icon = f'<link rel="icon" href="{html.escape(favicon)}">\n' if favicon else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
            f"<title>{html.escape(title)}</title>\n<meta charset=\"utf-8\">\n{icon}"
            f'<meta http-equiv="Refresh" content="0; url={html.escape(target)}">\n</head>\n'
            f'<body><p><a href="{html.escape(target)}">{html.escape(title)}</a></p></body>\n'
            "</html>\n")


def write_index_redirect(app: Sphinx, exception: Exception | None) -> None:
    """Before sphinx-external-toc writes its bare redirect (it only writes a missing one)."""
    if exception is not None or app.builder.name != "html" or "index" in app.env.found_docs:
        return
    favicon = app.config.html_favicon
    icon = f"_static/{PurePosixPath(str(favicon)).name}" if favicon else None
    target = app.builder.get_target_uri(app.config.root_doc)
    (Path(app.outdir) / "index.html").write_text(
        redirect_page(target, app.config.html_title or app.config.project, icon), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Sphinx: the chapters' main figures (collected when a chapter is read).
# ---------------------------------------------------------------------------------------------

def _figures(env: Any) -> dict[str, str]:
    if not hasattr(env, "course_site_figures"):
        env.course_site_figures = {}
    return env.course_site_figures


def _cell_ids(path: Path) -> list[str | None]:
    return [cell.get("id") for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]]


_GLUE_REF = re.compile(r"\{glue:([A-Za-z_]\w*)(?::([^{}]*))?\}")


def fill_glue(alt: str, values: Mapping[str, str]) -> str:
    """``alt`` with each ``{glue:NAME}`` or ``{glue:NAME:FORMAT}`` replaced by the glued value.

    ``values`` maps a glued name to its ``text/plain`` form (as ``course_lib.book.glue`` stores
    it); FORMAT is a Python format spec, applied as myst-nb's ``{glue:text}`` role applies it.

    >>> fill_glue("accuracy {glue:acc:.1%} after {glue:n} steps", {"acc": "0.9871", "n": "300"})
    'accuracy 98.7% after 300 steps'
    >>> fill_glue("{glue:nope}", {})
    Traceback (most recent call last):
    ...
    KeyError: 'nope'
    """
    from myst_nb.core.variables import format_plain_text

    def one(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2) or ""
        if name not in values:
            raise KeyError(name)
        return format_plain_text(values[name], spec)

    return _GLUE_REF.sub(one, alt)


def _glued_values(app: Sphinx, doctree: nodes.document) -> dict[str, str]:
    """``{name: text/plain}`` that this chapter's executed run glued (myst-nb's glue data)."""
    renderer = doctree.get("nb_renderer")
    data = renderer.renderer.nb_client.glue_data if renderer is not None else None
    if data is None:
        path = Path(app.outdir).parent / "jupyter_execute" / f"{app.env.docname}.glue.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return {k: v["data"]["text/plain"] for k, v in data.items() if "text/plain" in v["data"]}


def _where(image: nodes.image, page: str, ids: Sequence[str | None]) -> str:
    """``section "..." of "...", cell N (id ...)`` for an output image (``ids``: the cells')."""
    section, cell = image.parent, None
    while section is not None and not isinstance(section, nodes.section):
        if cell is None and section.get("nb_element") == "cell_code":
            cell = section
        section = section.parent
    title = section.next_node(nodes.title).astext() if section is not None else page
    index = cell.get("cell_index", "?") if cell is not None else "?"
    cell_id = ids[index] if isinstance(index, int) and index < len(ids) else None
    return f'section "{title}" of "{page}", cell {index}' + (f" (id {cell_id})" if cell_id else "")


def describe_output_figures(app: Sphinx, doctree: nodes.document) -> None:
    """Fill the glued numbers into each figure's own alt text; warn about a figure without one."""
    if not _chapter_docs(app, [app.env.docname]):
        return
    page_title = doctree.next_node(nodes.title)
    page = page_title.astext() if page_title else app.env.docname
    values: dict[str, str] | None = None
    ids = _cell_ids(Path(app.env.doc2path(app.env.docname)))
    for image in doctree.findall(nodes.image):
        alt = image.get("alt", "").strip()
        if not alt:
            LOGGER.warning(f"course_site: a figure without alt text in {_where(image, page, ids)}:"
                           ' give the cell "mystnb": {"image": {"alt": "..."}} in its metadata',
                           location=image, type="course_site", subtype="figure_alt")
            continue
        if "{glue:" in alt:
            values = _glued_values(app, doctree) if values is None else values
            try:
                image["alt"] = fill_glue(alt, values)
            except KeyError as err:
                raise ExtensionError(
                    f"course_site: the alt text of the figure in {_where(image, page, ids)} names "
                    f"{{glue:{err.args[0]}}}, which {app.env.docname} did not glue") from err


def collect_main_figure(app: Sphinx, doctree: nodes.document) -> None:
    """Remember the image of a chapter's main figure (runs after Sphinx's image collector)."""
    docname = app.env.docname
    if not _chapter_docs(app, [docname]):
        return
    entries = {e.slug: e for e in _load_chapters(app)}
    entry = entries.get(_slug(docname))
    ids = _cell_ids(Path(app.env.doc2path(docname)))
    wanted = ids.index(entry.main_figure) if entry and entry.main_figure in ids else None
    tagged, by_id = None, None
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code":
            continue
        images = [img["uri"] for img in cell.findall(nodes.image)]
        if not images:
            continue
        if MAIN_FIGURE_TAG in cell.get("cell_metadata", {}).get("tags", []) and tagged is None:
            tagged = images[0]
        if cell.get("cell_index") == wanted:
            by_id = images[0]
    _figures(app.env).pop(docname, None)
    if tagged or by_id:
        _figures(app.env)[docname] = tagged or by_id


def purge_figure(app: Sphinx, env: Any, docname: str) -> None:
    _figures(env).pop(docname, None)


def merge_figures(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    _figures(env).update({d: u for d, u in _figures(other).items() if d in docnames})


# ---------------------------------------------------------------------------------------------
# Sphinx: the course map and run-time tables (placeholders filled once everything is read).
# ---------------------------------------------------------------------------------------------

class course_table(nodes.General, nodes.Element):
    """Placeholder for a table that needs every chapter's execution (``kind``: map or runtimes)."""


def _mark_for_rewrite(directive: SphinxDirective) -> None:
    """Re-write the page when a notebook is re-executed (myst-nb's flag for its own exec table)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    NbMetadataCollector.set_doc_data(directive.env, directive.env.docname, "has_exec_table", True)
    for name in ("course_chapters_file", "course_gpu_runtimes"):
        directive.env.note_dependency(str(_srcdir(directive.env.app) / directive.config[name]))


class CourseMap(SphinxDirective):
    """``{course-map}``: one row per chapter: needs, experiment and thumbnail, CPU and GPU time."""

    def run(self) -> list[nodes.Node]:
        _mark_for_rewrite(self)
        return [course_table(kind="map")]


class CourseRuntimes(SphinxDirective):
    """``{course-runtimes}``: one row per chapter: this build's CPU time, the recorded GPU time."""

    def run(self) -> list[nodes.Node]:
        _mark_for_rewrite(self)
        return [course_table(kind="runtimes")]


def _load_chapters(app: Sphinx) -> list[ChapterEntry]:
    path = _srcdir(app) / app.config.course_chapters_file
    docs = _chapter_docs(app, sorted(app.env.found_docs))
    slugs = sorted(_slug(d) for d in docs)
    try:
        return parse_chapters(yaml.safe_load(path.read_text(encoding="utf-8")), slugs,
                              app.config.course_chapters_file)
    except (OSError, ValueError) as err:
        raise ExtensionError(f"course_site: {err}") from err


def _load_gpu(app: Sphinx) -> dict[str, GpuRun]:
    path = _srcdir(app) / app.config.course_gpu_runtimes
    try:
        return parse_gpu_runtimes(json.loads(path.read_text(encoding="utf-8")),
                                  app.config.course_gpu_runtimes)
    except (OSError, ValueError) as err:
        raise ExtensionError(f"course_site: {err}") from err


def _table(headers: Sequence[str], rows: Sequence[Sequence[list[nodes.Node]]],
           widths: Sequence[int]) -> nodes.table:
    table = nodes.table(classes=["colwidths-given", "course-table"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    head += nodes.row("", *[nodes.entry("", nodes.paragraph(text=h)) for h in headers])
    body = nodes.tbody()
    group += body
    for row in rows:
        body += nodes.row("", *[nodes.entry("", *cell) for cell in row])
    return table


def _doc_link(app: Sphinx, fromdoc: str, docname: str, text: str) -> nodes.paragraph:
    ref = pending_xref("", refdoc=fromdoc, refdomain="std", reftype="doc",
                       reftarget="/" + docname, refexplicit=True, refwarn=True)
    ref += nodes.inline(text=text)
    return nodes.paragraph("", "", ref)


class FillCourseTables(SphinxPostTransform):
    """Fill the placeholders once all chapters are read; link each chapter to the notation page."""

    default_priority = 8  # before the reference resolver (10), so the chapter links resolve

    def run(self, **kwargs: Any) -> None:
        app, docname = self.app, self.env.docname
        placeholders = list(self.document.findall(course_table))
        if placeholders:
            chapters = {_slug(d): d for d in _chapter_docs(app, self.env.found_docs)}
            entries = _load_chapters(app)
            gpu = _load_gpu(app)
            for node in placeholders:
                make = self._map if node["kind"] == "map" else self._runtimes
                node.replace_self(make(docname, entries, chapters, gpu))
        if _chapter_docs(app, [docname]) and app.builder.format == "html":
            self._link_notation(docname)

    def _times(self, slug: str, docname: str, gpu: Mapping[str, GpuRun]) -> tuple[str, str]:
        from myst_nb.sphinx_ import NbMetadataCollector

        exec_data = NbMetadataCollector.get_doc_data(self.env).get(docname, {}).get("exec_data")
        current = file_sha256(Path(self.env.doc2path(docname)))
        return cpu_cell(exec_data), gpu_cell(gpu.get(slug), current)

    def _title(self, docname: str) -> str:
        return self.env.titles[docname].astext()

    def _map(self, fromdoc: str, entries: Sequence[ChapterEntry], chapters: Mapping[str, str],
             gpu: Mapping[str, GpuRun]) -> nodes.Node:
        rows = []
        for entry in entries:
            doc = chapters[entry.slug]
            needs = ", ".join(str(e.number) for e in entries if e.slug in entry.needs) or "none"
            figure = _figures(self.env).get(doc)
            shows: list[nodes.Node] = [nodes.paragraph(text=entry.experiment)]
            if figure is None:
                if self.env.config.nb_execution_mode != "off":
                    raise ExtensionError(
                        f"course_site: chapter {entry.slug} has no main figure: no image in the "
                        f"output of cell {entry.main_figure!r} (main_figure in "
                        f"{self.env.config.course_chapters_file}) nor in a cell tagged "
                        f"{MAIN_FIGURE_TAG!r}")
                shows.append(nodes.paragraph(text="(thumbnail: the notebooks were not executed "
                                                  "by this build)"))
            else:
                shows.append(nodes.image(uri=figure, candidates={"*": figure},
                                         alt=entry.figure_alt, width="260px",
                                         classes=["course-thumbnail"]))
            cpu, gpu_time = self._times(entry.slug, doc, gpu)
            rows.append([[_doc_link(self.app, fromdoc, doc, self._title(doc))],
                         [nodes.paragraph(text=needs)], shows,
                         [nodes.paragraph(text=cpu)], [nodes.paragraph(text=gpu_time)]])
        return _table(["chapter", "builds on chapters", "what its experiment shows",
                       "runs on a CPU", "runs on a GPU"], rows, [18, 10, 44, 12, 16])

    def _runtimes(self, fromdoc: str, entries: Sequence[ChapterEntry],
                  chapters: Mapping[str, str], gpu: Mapping[str, GpuRun]) -> nodes.Node:
        rows = []
        for entry in entries:
            doc = chapters[entry.slug]
            cpu, gpu_time = self._times(entry.slug, doc, gpu)
            rows.append([[_doc_link(self.app, fromdoc, doc, self._title(doc))],
                         [nodes.paragraph(text=cpu)], [nodes.paragraph(text=gpu_time)]])
        # The kernels inherit the build's environment: say so when it ran the short demos.
        mode = "quick mode" if os.environ.get("COURSE_LIB_QUICK") else "full mode"
        return _table(["chapter", f"this build (CPU, {mode})", "recorded GPU run"], rows,
                      [40, 25, 35])

    def _link_notation(self, docname: str) -> None:
        target = self.env.config.course_notation_doc
        if target not in self.env.found_docs:
            raise ExtensionError(f"course_site: the notation page {target!r} is not in the book")
        first = next(iter(self.document.findall(
            lambda n: isinstance(n, (nodes.math, nodes.math_block)))), None)
        if first is None:
            return
        link = nodes.reference("", "notation", internal=True,
                               refuri=self.app.builder.get_relative_uri(docname, target),
                               reftitle="the symbols of the course")
        note = nodes.inline("", "", classes=["course-notation-link"])
        note += [nodes.Text(" (symbols: "), link, nodes.Text(")")]
        # Right after the symbol (inline) or the display equation.
        follow = note if isinstance(first, nodes.math) else nodes.paragraph("", "", note)
        first.parent.insert(first.parent.index(first) + 1, follow)


def rewrite_tables_always(app: Sphinx, env: Any) -> list[str]:
    """Pages with a course table are rewritten on every build (the GPU file or a figure may
    change)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    return [d for d, data in NbMetadataCollector.get_doc_data(env).items()
            if data.get("has_exec_table") and d in env.found_docs]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("course_release_dir", "chapters", "env")
    app.add_config_value("course_colab_dir", "colab", "env")
    app.add_config_value("course_chapters_file", "_data/chapters.yml", "env")
    app.add_config_value("course_gpu_runtimes", "_data/gpu_runtimes.json", "env")
    app.add_config_value("course_notation_doc", "notation", "env")
    app.add_node(course_table)
    app.add_directive("course-map", CourseMap)
    app.add_directive("course-runtimes", CourseRuntimes)
    app.add_post_transform(FillCourseTables)
    app.connect("config-inited", read_every_bibfile)
    app.connect("env-before-read-docs", check_colab_copies)
    app.connect("doctree-read", collect_main_figure, priority=600)
    app.connect("doctree-read", describe_output_figures, priority=610)
    app.connect("env-purge-doc", purge_figure)
    app.connect("env-merge-info", merge_figures)
    app.connect("env-updated", rewrite_tables_always)
    # After sphinx-book-theme's launch and download buttons (priority 501).
    app.connect("html-page-context", point_buttons_at_colab_copy, priority=502)
    app.connect("html-page-context", drop_duplicate_scripts)
    app.connect("build-finished", serve_colab_copies)
    app.connect("build-finished", write_index_redirect, priority=400)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
