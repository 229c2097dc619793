"""The website as readers meet it.

Fast tests check the site's own logic without a build: the course_site extension's functions, the
course map data against the table of contents, the drawn map, the link checker on a tiny site.
The browser test of the checker runs Chromium on a tiny hand-made site (slow: it starts a browser).
The book tests (slow, xdist group "book") serve the built site on 127.0.0.1 and load every page in
headless Chromium: no console error, no failed request, math typeset without errors, every image
loaded, the search finds chapter 2, each launch and download button opens a notebook of the
repository; a screenshot of every page is kept in _build/screenshots/. The same browser session
audits every page at 1280 and 390 px (scripts/site_audit.py): no axe-core WCAG 2.0/2.1 A/AA
violation, visible keyboard focus, formulas no Tab stops, each chapter figure with its own text
alternative and shown once, no sideways scrolling and readable plot text on a phone, and a
chapter's first visit within its weight. Every internal link and anchor resolves; external links
are listed in _build/external-links.txt, never fetched.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path, PurePosixPath
from types import ModuleType
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.conftest import BUILD, ROOT, chapter_slugs, release_notebook

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
BOOK = [pytest.mark.slow, pytest.mark.xdist_group("book")]
#: A word of chapter 2 that the site's search must find there.
SEARCH_TERM = "sinusoidal"


def _module(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


site_ext = _module("course_site", ROOT / "_ext" / "course_site.py")
pages_ext = _module("course_pages", ROOT / "_ext" / "course_pages.py")
links = _module("check_links", ROOT / "scripts" / "check_links.py")
browser_mod = _module("site_browser", ROOT / "scripts" / "site_browser.py")
audit_mod = _module("site_audit", ROOT / "scripts" / "site_audit.py")
course_map = _module("course_map", ROOT / "scripts" / "course_map.py")
gpu_record = _module("record_gpu_runtimes", ROOT / "scripts" / "record_gpu_runtimes.py")


def toc_chapters() -> list[str]:
    """Chapter slugs in the order of _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [PurePosixPath(f).parent.name for f in files if f.startswith("chapters/")]


# ------------------------------------------------------------------ fast: the extension's logic

@pytest.mark.parametrize("module", [site_ext, pages_ext, links, browser_mod, audit_mod, course_map,
                                    gpu_record], ids=lambda m: m.__name__)
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    if module in (site_ext, pages_ext, audit_mod, course_map, gpu_record):
        assert result.attempted > 0


def test_alt_texts_show_the_numbers_the_chapter_glued() -> None:
    values = {"acc": "0.98765", "steps": "300", "name": "'GPT-2'"}
    alt = "Accuracy {glue:acc:.1%} after {glue:steps} steps of {glue:name}; {not glue}"
    assert site_ext.fill_glue(alt, values) == "Accuracy 98.8% after 300 steps of GPT-2; {not glue}"
    assert site_ext.fill_glue("{glue:acc:.3f}", values) == "0.988"
    with pytest.raises(KeyError, match="missing"):
        site_ext.fill_glue("{glue:acc} and {glue:missing:.2f}", values)


def test_a_plot_is_never_shown_smaller_than_its_text_allows() -> None:
    for natural, dpi, pt in [(611, 100.0, 10.0), (1570, 100.0, 10.0), (600, 200.0, 11.0)]:
        least = pages_ext.plot_min_width(natural, dpi, pt)
        assert audit_mod.label_px(least, natural, dpi, pt) >= audit_mod.MIN_LABEL_PX
        assert audit_mod.label_px(least - 1, natural, dpi, pt) < audit_mod.MIN_LABEL_PX
    assert pages_ext.MIN_LABEL_PX == audit_mod.MIN_LABEL_PX
    body = ('<p><img alt="x" src="a.png" /></p><img alt="loss" src="../_images/p.png" />'
            '<img alt="map" src="../_images/map.svg" />')
    marked = pages_ext.mark_plots(body, lambda src: (611, 300, 100.0), 10.0)
    assert marked.count('loading="lazy"') == 1 and "--plot-min-width: 396px" in marked
    assert pages_ext.mark_plots(body, lambda src: None, 10.0) == body


def test_plots_are_reencoded_only_when_smaller_and_keep_their_dpi(tmp_path: Path) -> None:
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(3, 2), dpi=100)
    fig.add_subplot().plot([0, 1, 4], label="a line")
    fig.savefig(tmp_path / "plot.png")
    before = (tmp_path / "plot.png").stat().st_size
    assert pages_ext.palette_png(tmp_path / "plot.png") > 0
    assert (tmp_path / "plot.png").stat().st_size < before
    assert pages_ext.png_info(tmp_path / "plot.png") == (300, 200, pytest.approx(100.0, abs=0.1))
    assert Image.open(tmp_path / "plot.png").mode == "P"
    assert pages_ext.palette_png(tmp_path / "plot.png") == 0, "already a palette: left alone"


def test_citations_are_list_items_and_unused_assets_are_not_loaded() -> None:
    from sphinx.builders.html._assets import _JavaScript

    body = '<div role="list" class="citation-list"><div class="citation" role="doc-biblioentry">'
    assert "doc-biblioentry" not in pages_ext.citations_as_list(body)
    scripts = [_JavaScript("a.js"), _JavaScript("sphinx-thebe.js"),
               _JavaScript(None, body="const THEBE_JS_URL = 1"), _JavaScript("b.js"),
               _JavaScript("design-tabs.js")]
    assert pages_ext.without_unused(scripts, "<p>") == [scripts[0], scripts[3]]
    assert pages_ext.without_unused(scripts, '<div class="sd-tab-set">')[-1] == scripts[4]


def _render() -> pages_ext.Render:
    """The site's renderer (MathJax in Node) with _config.yml's macros."""
    macros = CONFIG["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    return pages_ext.node_renderer(macros, "fonts")


def test_formulas_are_typeset_at_build_time_readable_and_no_tab_stops() -> None:
    """Each formula becomes CommonHTML with its MathML for screen readers, no Tab stop and no
    MathJax script on the page; the course's macros are defined, and errors are found."""
    body = ('<p><span class="math notranslate nohighlight">\\(\\softmax(x) &lt; 1\\)</span></p>'
            '<div class="math notranslate nohighlight" id="equation-a">\n<span class="eqno">(1)'
            '</span>\\[\\frac{1}{2}\\]</div>')
    typeset, css = pages_ext.typeset_formulas(body, _render())
    assert "\\(" not in typeset and "\\[" not in typeset
    assert typeset.count("<mjx-container") == 2 and 'display="true"' in typeset
    assert typeset.count("<mjx-assistive-mml") == 2 and "mathcolor" not in typeset
    assert "<mi>softmax</mi>" in typeset and "<mo>&lt;</mo>" in typeset
    assert "tabindex" not in typeset
    assert '<span class="eqno">(1)</span><mjx-container' in typeset, "equation numbers stay"
    assert "@font-face" in css and 'url("fonts/MathJax_Main-Regular.woff")' in css
    formulas = [("\\nosuchmacro x", False), ("\\frac{1", False), ("x", True)]
    html, _css = _render()(formulas)
    assert pages_ext.math_problems(formulas, html) == ["undefined macro in: \\nosuchmacro x",
                                                       "TeX error in: \\frac{1"]


def test_every_formula_of_a_written_page_is_typeset_once(tmp_path: Path) -> None:
    """The table of contents' formulas too (the theme writes it from the headings); the
    stylesheet goes in the head with fonts relative to the page; a typeset page is left alone."""
    site = tmp_path / "html"
    page = site / "chapters" / "x.html"
    page.parent.mkdir(parents=True)
    page.write_text('<html><head><title>x</title></head><body><nav><a>Why '
                    '<span class="math notranslate nohighlight">\\(\\sqrt{d}\\)</span></a></nav>'
                    '<p><span class="math notranslate nohighlight">\\(\\nosuch\\)</span></p>'
                    '</body></html>')
    assert pages_ext.typeset_page(page, site, {}) == ["undefined macro in: \\nosuch"]
    html = page.read_text()
    assert html.count("<mjx-container") == 2 and "\\(" not in html
    assert '</style>\n</head>' in html and 'url("../_static/mathjax/output/chtml' in html
    assert pages_ext.typeset_page(page, site, {}) == [] and page.read_text() == html


def test_pages_load_no_mathjax_script() -> None:
    from sphinx.builders.html._assets import _JavaScript

    scripts = [_JavaScript("mathjax/startup.js"), _JavaScript(None, body="window.MathJax = {}"),
               _JavaScript("a.js")]
    assert pages_ext.without_unused(scripts, "<p>") == [scripts[2]]


def test_the_build_draws_every_chapter_s_plot_text_at_the_course_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel the build starts (a child process) reads the course's text size from MATPLOTLIBRC,
    and the phone check assumes that size."""
    import subprocess
    from types import SimpleNamespace

    from course_lib.plotting import FONT_PT, smallest_text_pt

    monkeypatch.setenv("MATPLOTLIBRC", "")
    pages_ext.course_plot_text(SimpleNamespace(outdir=str(tmp_path / "html")), None)
    child = subprocess.run([sys.executable, "-c", "import matplotlib.pyplot as plt; "
                            "print(plt.rcParams['font.size'], plt.rcParams['legend.fontsize'])"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.split() == [str(FONT_PT), "medium"]
    assert smallest_text_pt() == FONT_PT == 11.0


def test_unused_css_rules_go_and_states_of_used_elements_stay() -> None:
    words = pages_ext.css_words(['<nav class="navbar show"><a id="top">',
                                 "el.classList.add('open')"])
    css = ('.navbar:hover,.carousel{a:1}html[data-theme=dark] .navbar{b:2}.open:focus-visible{c:3}'
           '.navbar:not(.gone){d:4}.gone .navbar{e:5}#top::before{f:6}#nowhere{g:7}'
           '.bs-tooltip-auto{h:8}@media (max-width:600px){.gone{i:9}}'
           '@keyframes spin{to{transform:rotate(1turn)}}')
    assert pages_ext.purge_css(css, words) == (
        '.navbar:hover{a:1}html[data-theme=dark] .navbar{b:2}.open:focus-visible{c:3}'
        '.navbar:not(.gone){d:4}#top::before{f:6}.bs-tooltip-auto{h:8}'
        '@keyframes spin{to{transform:rotate(1turn)}}')


def test_code_keeps_only_the_spans_that_colour_it() -> None:
    css = ('html[data-theme="light"] .highlight { background: #fff; color: #080808 }\n'
           'html[data-theme="dark"] .highlight { background: #222; color: #F8F8F2 }\n'
           'html[data-theme="light"] .highlight .n { color: #080808 } /* Name */\n'
           'html[data-theme="dark"] .highlight .n { color: #F8F8F2 } /* Name */\n'
           'html[data-theme="light"] .highlight .p { color: #080808 }\n'
           'html[data-theme="dark"] .highlight .p { color: #ABE338 }\n'
           'html[data-theme="light"] .highlight .k { color: #080808; font-weight: bold }\n')
    assert pages_ext.plain_token_classes(css) == {"n"}
    page = ('<p><span class="n">prose</span></p><pre><span></span><span class="n">x</span>'
            '<span class="p">(</span><span class="n">a&lt;b</span></pre>')
    assert pages_ext.unwrap_plain_tokens(page, {"n"}) == (
        '<p><span class="n">prose</span></p>'
        '<pre><span></span>x<span class="p">(</span>a&lt;b</pre>')


def test_colab_copy_of_chapter_pages_only(tmp_path: Path) -> None:
    page = PurePosixPath("chapters/02-x/x.ipynb")
    assert site_ext.colab_copy(page) == PurePosixPath("colab/02-x/x.ipynb")
    assert site_ext.colab_copy(PurePosixPath("chapters/02-x/notes.md")) is None
    assert site_ext.colab_copy(PurePosixPath("other/02-x/x.ipynb")) is None
    (tmp_path / "colab" / "01-a").mkdir(parents=True)
    (tmp_path / "colab" / "01-a" / "a.ipynb").write_text("{}")
    sources = [PurePosixPath("chapters/01-a/a.ipynb"), page, PurePosixPath("intro.md")]
    assert site_ext.missing_colab_copies(tmp_path, sources) == ["colab/02-x/x.ipynb"]


def test_colab_launch_url_names_repository_branch_and_copy() -> None:
    url = site_ext.colab_launch_url("https://colab.research.google.com", "org", "repo", "dev",
                                    PurePosixPath("colab/03-t/t.ipynb"))
    assert url == "https://colab.research.google.com/github/org/repo/blob/dev/colab/03-t/t.ipynb"


def _entry(slug: str, needs: list[str]) -> dict[str, object]:
    return {"slug": slug, "short": slug, "needs": needs, "experiment": "shows  a\n thing",
            "main_figure": "cell-1", "figure_alt": "a plot"}


def test_course_map_data_is_validated() -> None:
    ok = site_ext.parse_chapters([_entry("01-a", []), _entry("02-b", ["01-a"])], ["01-a", "02-b"])
    assert [e.number for e in ok] == [1, 2] and ok[0].experiment == "shows a thing"
    with pytest.raises(ValueError, match="_toc.yml has"):
        site_ext.parse_chapters([_entry("01-a", [])], ["01-a", "02-b"])
    with pytest.raises(ValueError, match="not earlier chapters"):
        site_ext.parse_chapters([_entry("01-a", ["02-b"]), _entry("02-b", [])], ["01-a", "02-b"])
    broken = _entry("01-a", [])
    del broken["figure_alt"]
    with pytest.raises(ValueError, match="figure_alt"):
        site_ext.parse_chapters([broken], ["01-a"])
    with pytest.raises(ValueError, match="list of chapters"):
        site_ext.parse_chapters({"slug": "01-a"}, ["01-a"])


def test_course_map_covers_every_chapter_of_the_toc_and_names_real_figure_cells() -> None:
    data = yaml.safe_load((ROOT / "_data" / "chapters.yml").read_text())
    entries = site_ext.parse_chapters(data, toc_chapters())
    for entry in entries:
        cells = json.loads(release_notebook(entry.slug).read_text())["cells"]
        tagged = [c for c in cells if site_ext.MAIN_FIGURE_TAG in c["metadata"].get("tags", [])]
        by_id = [c for c in cells if c.get("id") == entry.main_figure]
        assert tagged or (by_id and by_id[0]["cell_type"] == "code"), (
            f"{entry.slug}: no code cell {entry.main_figure!r} (main_figure in "
            f"_data/chapters.yml) and no cell tagged {site_ext.MAIN_FIGURE_TAG!r}")


def test_every_chapter_with_a_source_is_on_the_site() -> None:
    assert toc_chapters() == [s for s in chapter_slugs() if s in toc_chapters()]
    missing = [s for s in chapter_slugs() if s not in toc_chapters()
               and release_notebook(s).is_file()]
    assert not missing, f"released chapters missing from _toc.yml and _data/chapters.yml: {missing}"


def test_drawn_course_map_is_fresh() -> None:
    assert course_map.main(["--check"]) == 0, "run python scripts/course_map.py"
    svg = (ROOT / "_figures" / "course-map.svg").read_text()
    assert svg.count("<rect") == len(toc_chapters())
    with pytest.raises(ValueError, match="not earlier chapters"):
        course_map.depths([{"slug": "01-a", "needs": ["02-b"]}])


def test_gpu_runtimes_are_validated_and_shown_honestly() -> None:
    recorded = site_ext.parse_gpu_runtimes(json.loads((ROOT / "_data" / "gpu_runtimes.json")
                                                      .read_text()))
    assert set(recorded) <= set(chapter_slugs())
    run = {"seconds": 12.5, "device": "NVIDIA H200", "date": "2026-11-23",
           "notebook_sha256": "abc"}
    parsed = site_ext.parse_gpu_runtimes({"chapters": {"01-a": run}})
    assert site_ext.gpu_cell(parsed["01-a"], "abc") == "12 s (NVIDIA H200, 2026-11-23)"
    assert "earlier version" in site_ext.gpu_cell(parsed["01-a"], "def")
    assert site_ext.gpu_cell(None, "abc") == site_ext.NO_GPU_RUN
    with pytest.raises(ValueError, match="01-a"):
        site_ext.parse_gpu_runtimes({"chapters": {"01-a": {**run, "seconds": -1}}})
    with pytest.raises(ValueError, match="notebook_sha256"):
        site_ext.parse_gpu_runtimes({"chapters": {"01-a": {"seconds": 3}}})
    with pytest.raises(ValueError, match="'chapters'"):
        site_ext.parse_gpu_runtimes([])


def test_recorded_gpu_run_is_what_the_page_reads() -> None:
    data = gpu_record.merge_run({"about": "x", "chapters": {"02-b": {
        "seconds": 5.0, "device": "old", "date": "2026-01-01", "notebook_sha256": "0"}}},
        "01-a", 7.26, "NVIDIA H200", "2026-11-23", "f" * 64)
    runs = site_ext.parse_gpu_runtimes(data)
    assert list(data["chapters"]) == ["01-a", "02-b"] and data["about"] == "x"
    assert runs["01-a"] == site_ext.GpuRun(7.3, "NVIDIA H200", "2026-11-23", "f" * 64)
    with pytest.raises(ValueError, match="positive"):
        gpu_record.merge_run(data, "01-a", 0.0, "GPU", "2026-11-23", "f")


def test_cpu_column_says_why_a_time_is_missing() -> None:
    assert site_ext.cpu_cell({"succeeded": True, "runtime": 61.0}) == "1 min 01 s"
    assert site_ext.cpu_cell({"succeeded": False, "runtime": 3.0}) == site_ext.NOT_EXECUTED
    assert site_ext.cpu_cell(None) == site_ext.NOT_EXECUTED


def test_duplicate_inline_scripts_are_dropped() -> None:
    from sphinx.builders.html._assets import _JavaScript

    scripts = [_JavaScript("a.js"), _JavaScript(None, body="const X = 1;"),
               _JavaScript("", body="const X = 1;"), _JavaScript("", body="const Y = 1;"),
               _JavaScript("a.js", priority=200)]
    context = {"script_files": scripts}
    site_ext.drop_duplicate_scripts(None, "p", "page.html", context, None)
    assert context["script_files"] == [scripts[0], scripts[1], scripts[3]]


def test_every_bibliography_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "bib").mkdir()
    for name in ("b.bib", "a.bib", "c.bib"):
        (tmp_path / "bib" / name).write_text("")
    assert site_ext.every_bibfile(["bib/c.bib"], tmp_path) == ["bib/c.bib", "bib/a.bib",
                                                                 "bib/b.bib"]
    read = site_ext.every_bibfile(CONFIG["bibtex_bibfiles"], ROOT)
    assert sorted(read) == sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("bib/*.bib"))


def test_book_root_has_no_static_folder() -> None:
    # Jupyter Book injects every .js under html_static_path as a <script> once a `_static/`
    # folder exists in the book's root: every vendored MathJax component would load twice.
    assert not (ROOT / "_static").exists(), "put site assets in _figures/, not _static/"


def test_site_urls_are_checked_against_the_built_site(tmp_path: Path) -> None:
    (tmp_path / "ch").mkdir()
    (tmp_path / "index.html").write_text("<p>root</p>")
    (tmp_path / "ch" / "a.html").write_text('<section id="further-reading"></section>')
    base = "https://example.org/course/"
    problems = links.check_site_urls(tmp_path, base, [
        base + "ch/a.html#further-reading", base + "ch/a.html#gone", base + "ch/b.html",
        "https://elsewhere.org/ch/a.html"])
    assert problems == [f"{base}ch/a.html#gone: no anchor #gone in ch/a.html",
                        f"{base}ch/b.html: missing file ch/b.html",
                        "https://elsewhere.org/ch/a.html: not under the site's address " + base]


def test_link_checker_finds_missing_files_and_anchors(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "_static").mkdir()
    (site / "_static" / "macros.html").write_text('<a href="{{ pathto(x) }}">theme macro</a>')
    (site / "img.png").write_bytes(b"png")
    (site / "index.html").write_text(
        '<h1 id="top">t</h1><a href="sub/page.html#sec">ok</a><a href="#top">self</a>'
        '<a href="sub/page.html#nowhere">bad anchor</a><img src="missing.png">'
        '<img src="img.png"><a href="https://example.org/x">ext</a><a href="/abs.html">abs</a>'
        '<a href="javascript:void(0)">js</a><a href="mailto:a@b.c">mail</a>')
    (site / "sub" / "page.html").write_text('<section id="sec"></section><a href="../">up</a>'
                                            '<a href="../index.html#top">back</a>')
    report = links.check_site(site)
    assert report.pages == 2
    assert report.external == {"https://example.org/x", "mailto:a@b.c"}
    assert len(report.broken) == 3, report.broken
    joined = "\n".join(report.broken)
    assert "no anchor #nowhere in sub/page.html" in joined
    assert "missing file missing.png" in joined and "absolute path" in joined
    with pytest.raises(FileNotFoundError, match="no HTML pages"):
        links.check_site(tmp_path / "empty")


# ------------------------------------------------------------------ slow: the browser check itself

#: MathJax as a browser loads it (the es5 bundles of the vendored mathjax-full).
MATHJAX = pages_ext.MATHJAX_FULL / "es5"


def _copy_mathjax(site: Path) -> None:
    """MathJax's combined browser bundle and its fonts (what the test pages load) into ``site``."""
    (site / "mathjax").mkdir(parents=True)
    shutil.copyfile(MATHJAX / "tex-mml-chtml.js", site / "mathjax" / "tex-mml-chtml.js")
    fonts = PurePosixPath("output", "chtml", "fonts", "woff-v2")
    shutil.copytree(MATHJAX / fonts, site / "mathjax" / fonts)


@pytest.mark.slow
def test_browser_check_reports_what_a_reader_would_hit(tmp_path: Path) -> None:
    """On a tiny site with known faults the checker reports exactly those faults."""
    assert (MATHJAX / "tex-mml-chtml.js").is_file(), "MathJax is vendored by `make setup`"
    site = tmp_path / "site"
    _copy_mathjax(site)
    png = (ROOT / "_figures" / "course-map.svg").read_bytes()
    (site / "map.svg").write_bytes(png)
    head = ('<link rel="icon" href="map.svg"><script>window.MathJax = {tex: {packages: '
            '{"[+]": ["noundefined"]}}};</script><script src="mathjax/tex-mml-chtml.js"></script>')
    (site / "good.html").write_text(f'<html><head>{head}</head><body><p>\\(x^2\\)</p>'
                                    '<img src="map.svg" alt="map"></body></html>')
    (site / "bad.html").write_text(
        f'<html><head>{head}</head><body><p>\\(\\frac{{a}}\\)</p><p>\\(\\nosuchmacro x\\)</p>'
        '<img src="gone.png" alt="gone"><script>console.error("boom")</script>'
        '<script src="missing.js"></script></body></html>')
    with browser_mod.serve(site) as base, browser_mod.Chromium() as browser:
        good = browser.load(base + "good.html", tmp_path / "shots" / "good.png")
        bad = browser.load(base + "bad.html")
    assert good.console_errors == [] and good.failed_requests == [], good
    assert good.broken_images == [] and good.info["math_nodes"] == 1
    assert good.info["math_errors"] == [] and good.info["math_problems"] == []
    assert good.screenshot and good.screenshot.stat().st_size > 1000
    assert any("boom" in e for e in bad.console_errors), bad.console_errors
    failed = "\n".join(bad.failed_requests)
    assert "gone.png: HTTP 404" in failed and "missing.js: HTTP 404" in failed
    assert len(bad.broken_images) == 1 and "gone.png" in bad.broken_images[0]
    assert len(bad.info["math_errors"]) == 1, bad.info
    assert any("nosuchmacro" in p for p in bad.info["math_problems"]), bad.info


def _plot(path: Path) -> None:
    """A 300 x 150 px plot at 100 dpi, its text at the course style's smallest size."""
    from matplotlib.figure import Figure

    from course_lib.plotting import smallest_text_pt

    fig = Figure(figsize=(3, 1.5), dpi=100)
    ax = fig.add_subplot()
    ax.plot([0, 1, 4])
    ax.set_xlabel("step", fontsize=smallest_text_pt())
    fig.savefig(path)


def _page(title: str, head: str, body: str, lang: str = ' lang="en"') -> str:
    return (f'<!DOCTYPE html><html{lang}><head><meta charset="utf-8"><title>{title}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"{head}</head><body><main><h1>{title}</h1>{body}</main></body></html>")


@pytest.mark.slow
def test_site_audit_finds_each_defect_on_a_tiny_site(tmp_path: Path) -> None:
    """A page with every defect the audit looks for fails each check; a clean one passes all.

    The clean page's formula is typeset at build time as the site's are (course_pages, fonts
    served by the site); the faulty one loads MathJax's combined tex-mml-chtml.js with its menu,
    whose formulas are Tab stops.
    """
    assert audit_mod.AXE.is_file(), "axe-core is vendored by `make setup`"
    site = tmp_path / "site"
    _copy_mathjax(site)
    shutil.copytree(BUILD / "vendor" / "static" / "mathjax", site / "_static" / "mathjax")
    _plot(site / "plot.png")
    shutil.copyfile(site / "plot.png", site / "copy.png")
    (site / "big.js").write_text("// " + "x" * audit_mod.MAX_CHAPTER_BYTES + "\n")
    macros = CONFIG["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    formula, css = pages_ext.typeset_formulas(
        '<span class="math notranslate nohighlight">\\(x^2\\)</span>',
        pages_ext.node_renderer(macros, pages_ext.MATH_FONTS))
    (site / "good.html").write_text(_page("Good", f"<style>{css}</style>", (
        f'<p>A formula {formula} and a <a href="#top">link</a>. <button>Run</button></p>'
        '<div class="cell_output"><img alt="a curve rising from 0 to 4" src="plot.png"></div>')))
    (site / "bad.html").write_text(_page("Bad", (
        '<script src="mathjax/tex-mml-chtml.js"></script><script src="big.js"></script>'
        '<style>.quiet:focus-visible { outline: none; }</style>'), (
        '<p>A formula \\(x^2\\). <button class="quiet">Run</button></p>'
        '<p style="white-space: nowrap">' + "a sentence that never wraps " * 8 + "</p>"
        '<div class="cell_output"><img src="plot.png" style="width: 100px"></div>'
        '<div class="cell_output"><img alt="" src="copy.png"></div>'
        '<div class="cell_output"><img alt="A figure drawn by the code cell above" '
        'src="plot.png"></div>'), lang=""))
    axe_js, text_pt = audit_mod.AXE.read_text(), audit_mod.smallest_text_pt()
    with browser_mod.serve(site) as base, browser_mod.Chromium() as browser:
        good, bad = (audit_mod.audit_page(browser, base + page, page, axe_js=axe_js,
                                          text_pt=text_pt, chapter=True)
                     for page in ("good.html", "bad.html"))
    assert good.problems == [], good.problems
    assert good.measured["label_px"] >= audit_mod.MIN_LABEL_PX
    assert good.measured["bytes"] < audit_mod.MAX_CHAPTER_BYTES
    axe = "\n".join(bad.axe)
    assert "axe html-has-lang" in axe and "axe image-alt" in axe, axe
    assert any("no visible focus: button.quiet" in p for p in bad.focus), bad.focus
    assert any("formulas are Tab stops" in p for p in bad.focus), bad.focus
    figures = "\n".join(bad.figures)
    assert "no text alternative: " + base + "copy.png" in figures, figures
    assert "generic text alternative" in figures, figures
    assert figures.count("shown twice") == 2, figures  # copy.png (same bytes), plot.png again
    phone = "\n".join(bad.phone)
    assert "scrolls sideways" in phone and "a sentence that never wraps" in phone, phone
    assert re.search(r"plot text [0-8]\.\d px < 9 px: .*plot\.png", phone), phone
    assert len(bad.weight) == 1 and "first visit loads" in bad.weight[0], bad.weight


# ------------------------------------------------------------------ slow: the built website

def _pages(site: Path) -> list[str]:
    return [p.relative_to(site).as_posix() for p in links.site_pages(site)]


@pytest.fixture(scope="module")
def visit(built_book: Path) -> dict[str, object]:
    """Every page of the built site loaded in one Chromium at 1280 px (screenshots in
    _build/screenshots) and at 390 px, and audited (scripts/site_audit.py)."""
    shots = BUILD / "screenshots"
    shutil.rmtree(shots, ignore_errors=True)
    reports, audits = {}, {}
    axe_js, text_pt = audit_mod.AXE.read_text(), audit_mod.smallest_text_pt()
    with browser_mod.serve(built_book) as base, browser_mod.Chromium() as browser:
        for page in _pages(built_book):
            audits[page] = audit_mod.audit_page(
                browser, base + page, page, axe_js=axe_js, text_pt=text_pt,
                chapter=page.startswith("chapters/"),
                screenshot=shots / browser_mod.shot_name(page))
            reports[page] = audits[page].report
        search = browser_mod.search_results(browser, base, SEARCH_TERM)
    return {"base": base, "pages": reports, "audits": audits, "search": search}


def _found(visit: dict, check: str) -> dict[str, list[str]]:
    return {p: getattr(a, check) for p, a in visit["audits"].items() if getattr(a, check)}


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_no_page_violates_wcag_a_or_aa_at_either_width(visit: dict) -> None:
    """axe-core, WCAG 2.0 and 2.1, levels A and AA: the theme's and docutils' markup included."""
    assert not _found(visit, "axe"), json.dumps(_found(visit, "axe"), indent=1)[:6000]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_keyboard_focus_is_visible_and_formulas_are_no_tab_stops(visit: dict) -> None:
    assert not _found(visit, "focus"), json.dumps(_found(visit, "focus"), indent=1)[:6000]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_each_chapter_figure_has_its_own_text_and_is_shown_once(visit: dict) -> None:
    assert not _found(visit, "figures"), json.dumps(_found(visit, "figures"), indent=1)[:6000]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_on_a_phone_no_page_scrolls_sideways_and_plot_text_is_readable(visit: dict) -> None:
    assert not _found(visit, "phone"), json.dumps(_found(visit, "phone"), indent=1)[:6000]
    for slug in chapter_slugs():
        audit = visit["audits"][f"chapters/{slug}/{release_notebook(slug).stem}.html"]
        assert audit.measured["label_px"] is not None, f"{slug}: its plots were measured"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_a_chapter_first_visit_stays_light(visit: dict) -> None:
    assert not _found(visit, "weight"), json.dumps(_found(visit, "weight"), indent=1)[:6000]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_the_notebook_download_saves_the_file(visit: dict) -> None:
    for slug in chapter_slugs():
        page = visit["pages"][f"chapters/{slug}/{release_notebook(slug).stem}.html"]
        assert page.info["downloads_saved"] == [True], f"{slug}: the .ipynb link has `download`"


@pytest.mark.parametrize("page", ["intro.html", "search.html", "genindex.html", "notation.html",
                                  "glossary.html", "bibliography.html", "runtimes.html"])
@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_site_pages_exist(built_book: Path, page: str) -> None:
    assert (built_book / page).is_file()


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_page_loads_without_console_errors_or_failed_requests(visit: dict) -> None:
    pages = visit["pages"]
    assert len(pages) >= 5 + len(chapter_slugs())
    problems = {p: r.console_errors + r.failed_requests for p, r in pages.items()
                if r.console_errors or r.failed_requests}
    assert not problems, json.dumps(problems, indent=1)[:6000]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_math_is_typeset_without_errors(visit: dict) -> None:
    pages = visit["pages"]
    problems = {p: r.info["math_errors"] + r.info["math_problems"] for p, r in pages.items()
                if r.info["math_errors"] or r.info["math_problems"]}
    assert not problems, json.dumps(problems, indent=1)[:6000]
    scripted = [p for p, r in pages.items() if r.info["mathjax"]]
    assert not scripted, f"formulas are typeset at build time, yet MathJax runs on {scripted}"
    for page in ["notation.html"] + [f"chapters/{s}/{release_notebook(s).stem}.html"
                                     for s in chapter_slugs()]:
        assert pages[page].info["math_nodes"] >= 10, f"{page}: MathJax typeset its formulas"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_image_loads_with_a_size(visit: dict) -> None:
    broken = {p: r.broken_images for p, r in visit["pages"].items() if r.broken_images}
    assert not broken, broken
    # A reader who cannot see an image gets words, never its file name.
    unnamed = {p: [i["src"] for i in r.info["images"]
                   if not i["alt"].strip() or re.search(r"\.(png|svg|jpe?g)$", i["alt"])]
               for p, r in visit["pages"].items()}
    assert not any(unnamed.values()), {p: v for p, v in unnamed.items() if v}
    for slug in chapter_slugs():
        page = visit["pages"][f"chapters/{slug}/{release_notebook(slug).stem}.html"]
        assert len(page.info["images"]) >= 3, f"{slug}: its plots are on the page"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_search_finds_chapter_2(visit: dict) -> None:
    chapter = release_notebook("02-self-attention")
    assert SEARCH_TERM in chapter.read_text().lower(), "choose a search term of chapter 2"
    hits = [urlsplit(u).path for u in visit["search"]]
    assert any(h.endswith(f"chapters/02-self-attention/{chapter.stem}.html") for h in hits), hits


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_launch_and_download_buttons_open_notebooks_of_the_repository(visit: dict,
                                                                      built_book: Path) -> None:
    org_repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    branch = CONFIG["repository"]["branch"]
    for slug in chapter_slugs():
        name = release_notebook(slug).name
        page = visit["pages"][f"chapters/{slug}/{Path(name).stem}.html"]
        copy = ROOT / "colab" / slug / name
        assert copy.is_file(), f"{copy.relative_to(ROOT)} is missing"
        (colab,) = set(page.info["launch"])
        prefix = f"https://colab.research.google.com/github/{org_repo}/blob/{branch}/"
        assert colab.startswith(prefix), colab
        assert (ROOT / colab.removeprefix(prefix)).resolve() == copy.resolve(), colab
        (download,) = set(page.info["downloads"])
        served = built_book / unquote(urlsplit(download).path).lstrip("/")
        assert served.read_bytes() == copy.read_bytes(), f"{download} serves the Colab copy"
    others = {p: r.info["launch"] for p, r in visit["pages"].items()
              if r.info["launch"] and not p.startswith("chapters/")}
    assert not others, f"only chapter pages have launch buttons: {others}"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_the_site_root_leads_to_the_landing_page(visit: dict) -> None:
    root = visit["pages"]["index.html"]
    assert root.info["final_url"] == visit["base"] + "intro.html"
    assert not root.console_errors and not root.failed_requests


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_a_screenshot_of_every_page_is_kept(visit: dict) -> None:
    for page, report in visit["pages"].items():
        assert report.screenshot is not None and report.screenshot.stat().st_size > 10_000, page


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_internal_links_and_anchors_resolve(built_book: Path) -> None:
    report = links.check_site(built_book)
    (BUILD / "external-links.txt").write_text("".join(f"{u}\n" for u in sorted(report.external)))
    assert report.pages >= 5 + len(chapter_slugs()) and report.links > 100
    assert not report.broken, "\n".join(report.broken[:50])


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_colab_copies_link_to_pages_and_anchors_of_the_site(built_book: Path) -> None:
    """The Colab copies cite "(Author, year)" linked to the chapter's reading list on the site."""
    base = CONFIG["html"]["baseurl"]
    urls = set()
    for copy in sorted((ROOT / "colab").glob("*/*.ipynb")):
        for cell in json.loads(copy.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                urls |= set(re.findall(rf"\]\(({re.escape(base)}[^)\s]*)\)", text))
    assert any("#" in u for u in urls), "the Colab copies link their citations to the site"
    assert not links.check_site_urls(built_book, base, sorted(urls))


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_landing_page_maps_every_chapter_with_its_figure_and_times(built_book: Path) -> None:
    from bs4 import BeautifulSoup

    html = (built_book / "intro.html").read_text()
    soup = BeautifulSoup(html, "html.parser")
    entries = site_ext.parse_chapters(yaml.safe_load((ROOT / "_data" / "chapters.yml")
                                                     .read_text()), toc_chapters())
    thumbs = {img["alt"]: img["src"] for img in soup.select("img.course-thumbnail")}
    assert list(thumbs) == [e.figure_alt for e in entries], "one thumbnail per chapter, in order"
    for src in thumbs.values():
        assert (built_book / src).is_file() and (built_book / src).stat().st_size > 5000
    assert site_ext.NOT_EXECUTED not in html, "the build recorded every chapter's run time"
    (course_map_img,) = [i for i in soup.find_all("img") if "course-map.svg" in i["src"]]
    assert course_map_img["alt"].startswith("The course map: one box per chapter")
    runtimes = (built_book / "runtimes.html").read_text()
    assert site_ext.NOT_EXECUTED not in runtimes
    assert len(re.findall(r"\d+ s</p>", runtimes)) >= len(entries)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_chapters_link_the_notation_page_and_the_bibliography_lists_every_work(
        built_book: Path) -> None:
    for slug in chapter_slugs():
        html = (built_book / "chapters" / slug / f"{release_notebook(slug).stem}.html").read_text()
        assert 'class="course-notation-link"' in html and 'href="../../notation.html"' in html
    keys = {m.group(1) for bib in (ROOT / "bib").glob("*.bib")
            for m in re.finditer(r"^@\w+\{([^,]+),", bib.read_text(), re.M)}
    listed = (built_book / "bibliography.html").read_text().count('<div class="citation"')
    assert listed == len(keys), f"{listed} entries on the bibliography page, {len(keys)} keys"
