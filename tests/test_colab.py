"""What students open: the Colab copy of each chapter (``colab/``), as plain Jupyter renders it.

* the converter (``publish.colab``) turns each MyST construct into plain markdown, and refuses
  what it cannot convert;
* every committed Colab copy is plain Jupyter markdown, and nbconvert's HTML (the template plain
  Jupyter uses, with its MathJax 2) opened in headless Chromium shows typeset math, no MathJax
  error and no MyST left in the text; a deliberately broken page proves the check can fail;
* its equation numbers are the website's.

Each Colab copy runs top to bottom, blank and solved, on Colab's own runtime (the setup cell
installing course_lib as there) in tests/test_colab_runtime.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coursebook import Chapter, find_chapter
from publish import colab, measured
from publish.release import hand_edited
from publish.repository import repository_url, stale_urls
from publish.site import Site
from tests.conftest import ROOT, chapter_slugs, load, release_notebook, source_notebook

SLUGS = chapter_slugs()
MATHJAX2 = ROOT / "_build" / "vendor" / "mathjax2" / "MathJax.js"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def colab_notebook(slug: str) -> Path:
    return ROOT / "colab" / slug / release_notebook(slug).name


# --------------------------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------------------------

SITE = colab.SiteConfig("https://example.org/course/", {"softmax": r"\operatorname{softmax}"})
REFS = {
    "a2015": colab.Reference("a2015", "Ada et al.", "2015", "Ada, Bo and Cy (2015). A title."),
    "b2017": colab.Reference("b2017", "Bo and Cy", "2017", "Bo and Cy (2017). B title."),
}
PAGE = "https://example.org/course/chapters/01-x/x.html"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _convert(*texts: str, measured: dict | None = None) -> list[str]:
    nb = {"cells": [_md(t) for t in texts], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return [c["source"] for c in colab.to_colab(nb, page_url=PAGE, site=SITE, refs=REFS,
                                                measured=measured)["cells"]]


def test_citations_become_author_year_links_to_the_reading_list() -> None:
    out = _convert("# T", "As {cite:t}`a2015` showed {cite}`a2015,b2017`.",
                   "## Further reading\n\n```{bibliography}\n:filter: docname in docnames\n```\n")
    link = PAGE + "#further-reading"
    assert out[1] == (f"As [Ada et al. (2015)]({link}) showed "
                      f"([Ada et al., 2015]({link}); [Bo and Cy, 2017]({link})).")
    assert "- Ada, Bo and Cy (2015). A title.\n- Bo and Cy (2017). B title." in out[2]
    assert "{bibliography}" not in out[2]


def test_labelled_equations_are_tagged_and_references_numbered_in_page_order() -> None:
    out = _convert("$$\na = b\n$$ (eq-first)", "Then $$c = d$$ (eq-second) and {eq}`eq-first`.")
    assert out[0] == "$$\na = b \\tag{1}$$"
    assert out[1] == "Then $$c = d \\tag{2}$$ and (1)."


def test_glued_numbers_are_the_measured_values_formatted_as_the_website_formats_them() -> None:
    out = _convert("# Title", "Accuracy {glue:text}`acc:.1%` after {glue:text}`n:,` steps, "
                   "{glue:text}`ok`, {glue:text}`tag`.",
                   measured={"acc": "0.12345", "n": "12000", "ok": "True", "tag": "'bpe'"})
    assert out[1] == "Accuracy 12.3% after 12,000 steps, True, bpe."
    assert out[0].startswith("# Title\n\n*This is the Colab copy")
    assert "measured when the website was built" in out[0]
    assert "your run prints its own" in out[0] and "`name = value`" in out[0]
    assert "acc" not in out[0]


def test_a_glued_number_without_a_measured_value_stays_named_and_is_listed() -> None:
    text = "Accuracy {glue:text}`acc:.1%`, loss {glue:text}`loss:.2f`."
    assert _convert("# T", text, measured={"acc": "0.5"})[1] == "Accuracy 50.0%, loss `loss`."
    nb = {"cells": [_md(text), _md("{glue:text}`loss:.3f` again")]}
    assert colab.missing_values(nb, {"acc": "0.5"}) == ["loss"]
    assert colab.missing_values(nb, {"acc": "0.5", "loss": "1.0"}) == []


def test_no_title_note_without_glued_numbers() -> None:
    assert _convert("# Title", "Plain text.") == ["# Title", "Plain text."]


def test_a_measured_value_the_format_cannot_take_is_refused_by_name() -> None:
    with pytest.raises(colab.ColabConversionError, match=r"cell 1: measured acc = 'high'"):
        _convert("# T", "Accuracy {glue:text}`acc:.1%`.", measured={"acc": "'high'"})


def test_book_macros_are_expanded_and_other_commands_untouched() -> None:
    (out,) = _convert(r"$\softmax(x) + \softmaxes + \operatorname{a}$")
    assert out == r"$\operatorname{softmax}(x) + \softmaxes + \operatorname{a}$"


@pytest.mark.parametrize("text, says", [
    ("see {numref}`fig-1`", "role {numref}"),
    (":::{note}\nhi\n:::", "directive {note}"),
    ("```{figure} a.png\n```", "directive {figure}"),
    ("{cite}`nobody2020`", "citation key 'nobody2020'"),
    ("{glue}`acc`", "role {glue}"),
    ("{eq}`eq-missing`", "unknown equation 'eq-missing'"),
    ("(my-target)=\n# Heading", "target label"),
])
def test_what_cannot_be_converted_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(colab.ColabConversionError, match=re.escape(says)):
        _convert(text)


def test_the_course_bibliography_loads_with_author_year() -> None:
    refs = colab.load_references(sorted((ROOT / "bib").glob("*.bib")))
    assert refs["vaswani2017attention"].authors_short == "Vaswani et al."
    assert all(r.year.isdigit() for r in refs.values())


def test_repository_url_is_defined_once_and_repeated_everywhere() -> None:
    url = repository_url(Site().config)
    chapters = [find_chapter(slug) for slug in SLUGS]
    assert hand_edited(chapters) == [c.source for c in chapters] + [ROOT / "README.md"]
    for path in [ROOT / "README.md", *(p(slug) for slug in SLUGS for p in (
            source_notebook, release_notebook, colab_notebook))]:
        assert f"git+{url}" in path.read_text(), f"{path} installs course_lib from the repository"
        assert stale_urls([path], url) == [], f"{path} names another repository"
    # the check can fail: another address is found, in a notebook's JSON too
    assert [s.line for s in stale_urls([source_notebook(SLUGS[0])], url + "-elsewhere")] != []


# --------------------------------------------------------------------------------------------
# The committed Colab copies
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", SLUGS)
def test_colab_copy_is_plain_jupyter_markdown(slug: str) -> None:
    nb = load(colab_notebook(slug))
    release = load(release_notebook(slug))
    assert len(nb["cells"]) == len(release["cells"])
    for i, (cell, rel) in enumerate(zip(nb["cells"], release["cells"])):
        if cell["cell_type"] == "markdown":
            assert colab.leftovers("".join(cell["source"])) == [], f"cell {i}"
        else:  # code, outputs and nbgrader metadata are the release's
            assert cell == rel, f"cell {i} differs from the release"


def _chapter(slug: str) -> Chapter:
    return find_chapter(slug)


def _glue_names(slug: str) -> set[str]:
    """Every name chapter ``slug`` glues: cited by its prose, glued by its code (an f-string's
    fields as a word pattern), or committed in its measured values."""
    nb = load(release_notebook(slug))
    names = {re.escape(n) for c in nb["cells"] if c["cell_type"] == "markdown"
             for n, _ in measured.roles("".join(c["source"]))}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            for call in re.findall(r"\bglue\(\s*f?[\"']([^\"']+)[\"']", "".join(cell["source"])):
                names.add(re.sub(r"\\\{[^}]*\\\}", r"\\w+", re.escape(call)))
    names |= {re.escape(n) for n in measured.load(_chapter(slug)).values}
    return names


@pytest.mark.parametrize("slug", SLUGS)
def test_colab_copy_prose_shows_numbers_not_glue_names(slug: str) -> None:
    """The Colab copy's text shows the website's numbers: no glued value's name is left in its
    markdown, and a note under the title (only there) says whose figures they are."""
    patterns = [re.compile(rf"(?<![\w]){n}(?![\w])") for n in _glue_names(slug)]
    assert patterns, f"{slug} glues nothing"
    cells = [c for c in load(colab_notebook(slug))["cells"] if c["cell_type"] == "markdown"]
    left = [f"cell {i}: {m.group(0)}" for i, c in enumerate(cells) for p in patterns
            for m in p.finditer("".join(c["source"]))]
    assert left == [], f"glue names in {colab_notebook(slug)}'s prose (run `python -m publish " \
                       f"measure` after `make book`, then `make release`): {left}"
    notes = [i for i, c in enumerate(cells) if "measured when the website was built" in
             "".join(c["source"])]
    assert notes == [0]


def test_the_glue_name_check_finds_a_name_in_prose() -> None:
    """The negative control of the test above: a name glued by an f-string is found."""
    names = _glue_names("04-language-models")  # glue(f"ch4_bpt_{key}", ...) in its code
    assert any(re.fullmatch(n, "ch4_bpt_klingon") for n in names)
    assert not any(re.fullmatch(n, "bpt") for n in names)


@pytest.mark.parametrize("slug", SLUGS)
def test_every_glued_number_of_the_prose_has_a_committed_value(slug: str) -> None:
    chapter = _chapter(slug)
    committed = measured.load(chapter)
    assert measured.missing(chapter) == [], (
        f"no measured value in {chapter.measured}: run `make book`, "
        f"`python -m publish measure {slug}`, then `make release`")
    assert set(committed.varies) <= set(committed.values), "a varying name that is not measured"
    assert all(why.strip() for why in committed.varies.values()), "say why each value varies"
    for name, spec in measured.chapter_roles(chapter):
        measured.format_value(committed.values[name], spec)


@pytest.mark.parametrize("slug", SLUGS)
def test_numbers_are_formatted_as_myst_nb_formats_them(slug: str) -> None:
    """:func:`publish.measured.format_value` against myst-nb's own ``{glue:text}`` formatting,
    on every committed value of the chapter with the format its prose gives it."""
    from myst_nb.core.variables import format_plain_text

    values = measured.load(_chapter(slug)).values
    pairs = [(values[n], spec) for n, spec in measured.chapter_roles(_chapter(slug)) if n in values]
    pairs += [("0.5", ".0%"), ("1e-06", ".1e"), ("12000", ","), ("'text'", "s"), ("True", "s"),
              ("3", ".2f"), ("2.5", ".0f"), ("np.float64(0.5)", "s")]
    for text, spec in pairs:
        assert measured.format_value(text, spec) == format_plain_text(text, spec), (text, spec)


def _render(nb_path: Path, out_dir: Path) -> str:
    """nbconvert's HTML of ``nb_path`` (MathJax 2, errors shown), typeset by headless Chromium."""
    from nbconvert import HTMLExporter

    if not MATHJAX2.is_file():
        pytest.fail(f"{MATHJAX2} is missing: `make setup` vendors MathJax 2 from npm")
    exporter = HTMLExporter(mathjax_url=f"{MATHJAX2.as_uri()}?config=TeX-AMS_CHTML-full")
    html, _ = exporter.from_filename(str(nb_path))
    # Errors must show as MathJax error nodes, not be hidden by the noErrors/noUndefined extensions.
    strict = ('<script type="text/x-mathjax-config">MathJax.Hub.Config({TeX: {noErrors: '
              '{disabled: true}, noUndefined: {disabled: true}}});</script>')
    html = html.replace("<!-- Load mathjax -->", strict + "\n<!-- Load mathjax -->", 1)
    page = out_dir / (nb_path.stem + ".html")
    page.write_text(html, encoding="utf-8")
    done = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={out_dir / 'profile'}",
                           "--allow-file-access-from-files", "--virtual-time-budget=60000",
                           "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=240)
    return done.stdout


#: MyST as it shows in nbconvert's HTML (markdown is rendered to HTML before the browser sees it).
MYST_IN_HTML = {
    "a MyST role": re.compile(r"\{[A-Za-z][\w:.\-]*\}<code>[^<]*</code>"),
    "a MyST directive": re.compile(r'class="language-\{[^}"]*\}'),
    "an equation label": re.compile(r'type="math/tex; mode=display"[^>]*>[^<]*</script>\s*'
                                    r"\([\w\-:.]+\)"),
    "a target label": re.compile(r"<p>\([\w\-:.]+\)="),
    "a substitution": re.compile(r"\{\{[^}<]*\}\}"),
}


def _check_rendered(dom: str) -> list[str]:
    """What a student would see wrong on the rendered page (empty when it renders cleanly)."""
    problems = []
    if "MathJax_CHTML" not in dom:
        problems.append("MathJax typeset nothing")
    problems += [f"MathJax error: {m}" for m in re.findall(r"<merror><mtext>(.*?)</mtext>", dom)]
    if "Math Processing Error" in dom:
        problems.append("Math Processing Error")
    for what, pattern in MYST_IN_HTML.items():
        problems += [f"{what} in the page: {m.group(0)[:80]}" for m in pattern.finditer(dom)]
    return problems


@pytest.mark.slow
def test_render_check_catches_an_undefined_macro_and_a_role(tmp_path: Path) -> None:
    """The negative control: a page with a book-only macro and a MyST role fails the check."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "Scores $\\softmax(QK^\\top)$, see {cite}`vaswani2017attention`.\n\n$$x = 1$$ (eq-a)"
        "\n\n```{bibliography}\n:filter: docname in docnames\n```\n")])
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    problems = _check_rendered(_render(path, tmp_path))
    assert any("MathJax error" in p and "softmax" in p for p in problems), problems
    assert any("MyST role" in p and "vaswani2017attention" in p for p in problems), problems
    assert any("MyST directive" in p for p in problems), problems
    assert any("equation label" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_colab_copy_renders_in_plain_jupyter(slug: str, tmp_path: Path) -> None:
    assert shutil.which("chromium"), "chromium is missing: `make sysdeps` installs it"
    dom = _render(colab_notebook(slug), tmp_path)
    assert _check_rendered(dom) == []


@pytest.mark.slow
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("slug", SLUGS)
def test_colab_equation_numbers_are_the_websites(built_book: Path, slug: str) -> None:
    page = built_book / "chapters" / slug / release_notebook(slug).with_suffix(".html").name
    html = page.read_text()
    site = [(ident, int(n)) for ident, n in
            re.findall(r'id="equation-([\w\-]+)"[^>]*>.*?<span class="eqno">\((\d+)\)', html,
                       flags=re.S)]
    colab_text = "".join("".join(c["source"]) for c in load(colab_notebook(slug))["cells"]
                         if c["cell_type"] == "markdown")
    tags = [int(n) for n in re.findall(r"\\tag\{(\d+)\}", colab_text)]
    assert [n for _, n in site] == tags, "equation numbers differ between the website and Colab"
    assert tags == list(range(1, len(tags) + 1))


@pytest.mark.slow
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("slug", SLUGS)
def test_colab_numbers_are_the_websites(built_book: Path, slug: str) -> None:
    """Every number of the Colab copy's prose is the one the built website shows there, except
    the committed values marked as varying from run to run (``varies``: timings)."""
    import html

    page = built_book / "chapters" / slug / release_notebook(slug).with_suffix(".html").name
    site = [html.unescape(t) for t in
            re.findall(r'<span class="pasted-text">([^<]*)</span>', page.read_text())]
    chapter = _chapter(slug)
    committed = measured.load(chapter)
    cited = measured.chapter_roles(chapter)
    assert len(site) == len(cited), \
        "the website pastes another number of values than the prose cites"
    assert measured.missing(chapter) == [], f"run `python -m publish measure {slug}`"
    differ = [f"{name} ({spec}): website {shown}, committed "
              f"{measured.format_value(committed.values[name], spec)}"
              for (name, spec), shown in zip(cited, site) if name not in committed.varies
              and measured.format_value(committed.values[name], spec) != shown]
    assert differ == [], (f"run `python -m publish measure {slug}` and `make release` "
                          f"(or mark a run-to-run timing in `varies`): {differ}")
