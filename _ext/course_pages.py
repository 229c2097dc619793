"""Accessible, phone-friendly and light pages: the course website's second Sphinx extension.

Registered in _config.yml (``sphinx.local_extensions``) beside ``course_site``. What it changes in
what Jupyter Book, sphinx-book-theme and pydata-sphinx-theme write, and why (issue 23's audit):

* **Theme templates** (``_ext/theme/``, searched before the theme's): the search fields' names
  match what they show and their forms have a submit button; the colour-mode icons are
  decoration; the header's ``.ipynb`` item carries ``download`` (the server calls a notebook JSON,
  which a browser would show); the theme's Font Awesome script (1.4 MB: its CSS draws the same
  icons from web fonts) and, outside the search page, the search index are not loaded.
* **Styles** (``_ext/static/course-pages.css``): visible keyboard focus on every control; long
  inline code wraps; on a phone a plot uses the screen's width and never shrinks below the width
  at which its smallest text is ``MIN_LABEL_PX`` px (a wider plot scrolls inside its own box).
* **Plots**: every chapter the build executes draws its text at the course style's sizes (11 pt,
  ``course_lib.plotting.course_text_rc``, through ``MATPLOTLIBRC``), so a 6-inch plot fits a
  390 px phone with its text at 9 px or more.
* **Formulas** are typeset at build time, in the written pages (body, table of contents, links):
  MathJax 3 (mathjax-full, vendored by the Makefile) in Node (``_ext/typeset_math.js``) writes
  each as CommonHTML with its assistive MathML for screen readers, and the page's head gets the
  stylesheet of the characters it draws (the fonts are the site's). Pages load no MathJax script
  (0.75 MB), and formulas are no Tab stops (no menu); a TeX error or an undefined macro is a
  build warning.
* **Page bodies**: a display equation sits in a box that scrolls when it is too wide (MathJax's
  own container would scroll without taking keyboard focus, as formulas are no Tab stops);
  citations are a list of ``listitem`` (docutils writes ``role="list"`` around
  ``role="doc-biblioentry"``, a deprecated role that is no list item); each plot gets its size,
  lazy loading and ``--plot-min-width``, inside a box that scrolls (and takes keyboard focus,
  pydata's script sees to it) when the plot is wider than the column.
* **Assets**: sphinx-thebe's scripts (no live-code button is configured), and sphinx-design's on
  pages without its components, are dropped; PNG plots
  are re-encoded with a 256-colour palette when that is smaller; the theme's icon fonts (270 kB)
  are cut to the few icons the pages draw (``_static/course-icons/``, declared after the
  theme's fonts in the course's stylesheet), and the theme's CSS loses the rules of the other
  ~1900 icons (86 kB); every stylesheet loses the rules no element of the site can match
  (PurgeCSS's rule: 466 -> 156 kB), and code the spans of tokens drawn as plain text (a
  chapter's HTML: about 130 kB).

The functions above the Sphinx hooks take plain values and are unit-tested in tests/test_site.py.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from PIL import Image
from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
#: The smallest text of a plot on a phone's screen (px); scripts/site_audit.py checks it.
MIN_LABEL_PX = 9.0
#: Points per inch (matplotlib draws text in points).
PT_PER_INCH = 72.0


# ---------------------------------------------------------------------------------------------
# Plain logic (no Sphinx objects): unit-tested without a build.
# ---------------------------------------------------------------------------------------------

def plot_min_width(natural_px: int, dpi: float, text_pt: float,
                   min_px: float = MIN_LABEL_PX) -> int:
    """The narrowest display width (CSS px) at which a plot's ``text_pt`` text is ``min_px`` high.

    A plot ``natural_px`` pixels wide drawn at ``dpi`` has its text at ``text_pt * dpi / 72`` px;
    shown ``w`` px wide the text is that times ``w / natural_px``.

    >>> plot_min_width(600, 100.0, 10.0)
    389
    """
    return math.ceil(natural_px * min_px * PT_PER_INCH / (text_pt * dpi))


def citations_as_list(body: str) -> str:
    """docutils' citation entries as items of the list around them (ARIA: a list owns listitems).

    >>> citations_as_list('<div role="list"><div class="citation" role="doc-biblioentry">')
    '<div role="list"><div class="citation" role="listitem">'
    """
    return body.replace('role="doc-biblioentry"', 'role="listitem"')


_DISPLAY_MATH = re.compile(r'<div class="math notranslate nohighlight"[^>]*>.*?</div>', re.DOTALL)


def wrap_display_math(body: str) -> str:
    """Each display equation in a box that scrolls (and takes focus) when it is too wide.

    >>> wrap_display_math('<p>a</p><div class="math notranslate nohighlight">x</div>')
    '<p>a</p><div class="course-equation pst-scrollable-table-container"><div \
class="math notranslate nohighlight">x</div></div>'
    """
    return _DISPLAY_MATH.sub(
        lambda m: f'<div class="course-equation pst-scrollable-table-container">{m.group(0)}</div>',
        body)


#: mathjax-full (npm, vendored by the Makefile): Node typesets the formulas with it at build time.
MATHJAX_FULL = HERE.parent / "_build" / "vendor" / "mathjax-node" / "node_modules" / "mathjax-full"
#: MathJax's CommonHTML fonts as the site serves them (html_static_path), for the page's stylesheet.
MATH_FONTS = "_static/mathjax/output/chtml/fonts/woff-v2"

_FORMULA = re.compile(
    r'(?P<open><span class="math notranslate nohighlight">)\\\((?P<inline>.*?)\\\)(?=</span>)'
    r'|(?P<dopen><div class="math notranslate nohighlight"[^>]*>\s*'
    r'(?:<span class="eqno">.*?</span>)?)\\\[(?P<display>.*?)\\\](?=</div>)', re.DOTALL)

#: ``render([(tex, display), ...]) -> ([html, ...], css)``: how a page's formulas are typeset.
Render = Callable[[list[tuple[str, bool]]], tuple[list[str], str]]


def typeset_formulas(body: str, render: Render) -> tuple[str, str]:
    r"""``body`` with each formula Sphinx wrote (``\(..\)`` and ``\[..\]`` in their ``math``
    elements) replaced by its typeset HTML, and the stylesheet those need ("" if none).

    >>> typeset_formulas('<span class="math notranslate nohighlight">\\(a &lt; b\\)</span>',
    ...                  lambda fs: ([f"[{t}|{d}]" for t, d in fs], "css"))
    ('<span class="math notranslate nohighlight">[a < b|False]</span>', 'css')
    """
    found = list(_FORMULA.finditer(body))
    if not found:
        return body, ""
    formulas = [(html.unescape(m.group("inline") if m.group("open") else m.group("display")),
                 not m.group("open")) for m in found]
    typeset, css = render(formulas)
    parts, last = [], 0
    for match, out in zip(found, typeset, strict=True):
        parts += [body[last:match.start()], match.group("open") or match.group("dopen"), out]
        last = match.end()
    return "".join(parts) + body[last:], css


def math_problems(formulas: Iterable[tuple[str, bool]], typeset: Iterable[str]) -> list[str]:
    r"""The formulas MathJax could not typeset: a TeX error, or an undefined macro (red text).

    >>> math_problems([("x", False), ("\\nope", False)],
    ...               ["<math><mi>x</mi></math>", '<math><mtext mathcolor="red">'])
    ['undefined macro in: \\nope']
    """
    out = []
    for (tex, _display), html_out in zip(formulas, typeset, strict=True):
        if "<merror" in html_out:
            out.append(f"TeX error in: {tex[:120]}")
        elif 'mathcolor="red"' in html_out:
            out.append(f"undefined macro in: {tex[:120]}")
    return out


def minify_css(css: str) -> str:
    r"""MathJax's stylesheet without its comments, indentation and line breaks.

    >>> minify_css('a /* 0 */ {\n  b: 1;\n}\n\nc {\n  d: " ";\n}\n')
    'a{b: 1;}c{d: " ";}'
    """
    return re.sub(r"\s*\{\s*", "{", re.sub(r"\n\s*|/\*.*?\*/", "", css))


def node_renderer(macros: dict[str, str], font_url: str,
                  mathjax_full: Path = MATHJAX_FULL) -> Render:
    """A ``Render`` that typesets with MathJax in Node (``_ext/typeset_math.js``): CommonHTML
    with each formula's assistive MathML, its fonts from ``font_url``."""
    if not (mathjax_full / "js" / "mathjax.js").is_file():
        raise FileNotFoundError(f"{mathjax_full} is missing: `make setup` vendors mathjax-full")

    def render(formulas: list[tuple[str, bool]]) -> tuple[list[str], str]:
        request = {"formulas": [{"tex": t, "display": d} for t, d in formulas],
                   "macros": macros, "fontURL": font_url}
        done = subprocess.run(["node", str(HERE / "typeset_math.js")], check=True,
                              input=json.dumps(request), capture_output=True, text=True,
                              env={**os.environ, "MATHJAX_FULL": str(mathjax_full)})
        answer = json.loads(done.stdout)
        return answer["html"], minify_css(answer["css"])

    return render


_PLOT = re.compile(r'<img alt="(?P<alt>[^"]*)" src="(?P<src>[^"]*_images/[^"]+\.png)" />')


def mark_plots(body: str, info: Callable[[str], tuple[int, int, float] | None],
               text_pt: float) -> str:
    """Give each notebook plot of ``body`` its size, lazy loading and phone minimum width.

    ``info(src)`` is the plot's ``(width, height, dpi)`` in pixels, or None (left as it is).
    Each plot goes into a box that scrolls when the plot is wider than the column (pydata's
    script makes such a box focusable, ``.pst-scrollable-table-container``).

    >>> print(mark_plots('<img alt="a loss curve" src="../_images/x.png" />',
    ...                  lambda src: (600, 300, 100.0), 10.0))
    <div class="course-plot pst-scrollable-table-container"><img alt="a loss curve" \
src="../_images/x.png" width="600" height="300" loading="lazy" decoding="async" \
style="--plot-min-width: 389px" /></div>
    """
    def one(match: re.Match[str]) -> str:
        found = info(html.unescape(match.group("src")))
        if found is None:
            return match.group(0)
        width, height, dpi = found
        least = plot_min_width(width, dpi, text_pt)
        return (f'<div class="course-plot pst-scrollable-table-container">'
                f'<img alt="{match.group("alt")}" src="{match.group("src")}" width="{width}" '
                f'height="{height}" loading="lazy" decoding="async" '
                f'style="--plot-min-width: {least}px" /></div>')

    return _PLOT.sub(one, body)


def png_info(path: Path) -> tuple[int, int, float] | None:
    """``(width, height, dpi)`` of a PNG that records its dpi (as matplotlib's do), else None."""
    try:
        with Image.open(path) as image:
            dpi = image.info.get("dpi")
            return (image.width, image.height, float(dpi[0])) if dpi else None
    except OSError:
        return None


def palette_png(path: Path) -> int:
    """Re-encode a PNG with a 256-colour palette (dpi kept) when that is smaller; bytes saved.

    Plots are flat colours, lines and anti-aliased text: a palette keeps them as they look.
    """
    with Image.open(path) as image:
        image.load()
        if image.mode == "P":
            return 0
        dpi = image.info.get("dpi")
        rgba = image.convert("RGBA")
    method = Image.Quantize.FASTOCTREE
    small = rgba.quantize(colors=256, method=method, dither=Image.Dither.NONE)
    tmp = path.with_suffix(".palette.png")
    small.save(tmp, optimize=True, **({"dpi": dpi} if dpi else {}))
    saved = path.stat().st_size - tmp.stat().st_size
    if saved > 0:
        tmp.replace(path)
        return saved
    tmp.unlink()
    return 0


#: The theme's icon fonts (pydata-sphinx-theme's Font Awesome) and the subsets the pages load.
ICON_FONTS = ("fa-solid-900", "fa-brands-400", "fa-regular-400")
ICON_DIR = "_static/vendor/fontawesome/webfonts"
SUBSET_DIR = "_static/course-icons"


def icon_codepoints(css: str, pages: Iterable[str]) -> set[int]:
    r"""The icon glyphs the site draws: those of the ``fa-NAME`` classes ``pages`` use, and every
    glyph the theme's CSS draws by itself (``content`` outside ``.fa-NAME:before`` rules, and the
    characters of its ``--pst-icon-*`` properties).

    >>> css = ('.fa-a:before{content:"\\f001"}.fa-b:before{content:"\\f002"}'
    ...        '.x:after{content:"\\f003"}')
    >>> sorted(hex(c) for c in icon_codepoints(css, ['<i class="fa-solid fa-a"></i>']))
    ['0xf001', '0xf003']
    """
    used = icon_names(pages)
    points = set()
    for selectors, code in re.findall(r'([^{}]+)\{[^{}]*?content:\s*"\\([0-9a-f]{4,5})"', css):
        names = re.findall(r"\.fa-([a-z0-9-]+):+before", selectors)
        if not names or used.intersection(names):
            points.add(int(code, 16))
    # pydata's own icons (admonitions, links, arrows) are characters in --pst-icon-* properties.
    points |= {ord(c) for c in re.findall(r'--pst-icon-[a-z-]+:\s*"([^"\\])"', css)}
    return points


_ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:+before,?)+)\{content:"[^"]*"\}')


def icon_names(pages: Iterable[str]) -> set[str]:
    """The ``fa-NAME`` names the ``pages`` use (icons, sizes and styles alike)."""
    return {name for page in pages for name in re.findall(r"\bfa-([a-z0-9-]+)", page)}


def trim_icon_rules(css: str, used: set[str]) -> str:
    """The theme's CSS without the rules of the ~1900 icons no page draws.

    >>> trim_icon_rules('.a{x:1}.fa-a:before{content:"1"}.fa-b:before,.fa-c:before{content:"2"}',
    ...                 {"c"})
    '.a{x:1}.fa-b:before,.fa-c:before{content:"2"}'
    """
    def keep(match: re.Match[str]) -> str:
        names = re.findall(r"\.fa-([a-z0-9-]+)", match.group(1))
        return match.group(0) if used.intersection(names) else ""

    return _ICON_RULE.sub(keep, css)


def subset_icon_fonts(outdir: Path, codepoints: set[int]) -> int:
    """Write the theme's icon fonts cut down to ``codepoints`` (WOFF) into ``SUBSET_DIR``; the
    course's stylesheet declares them after the theme's, so the browser loads only these.
    Returns the bytes written."""
    from fontTools import subset

    target = outdir / SUBSET_DIR
    target.mkdir(parents=True, exist_ok=True)
    written = 0
    for name in ICON_FONTS:
        options = subset.Options()
        options.flavor, options.layout_features = "woff", ["*"]
        font = subset.load_font(str(outdir / ICON_DIR / f"{name}.ttf"), options)
        cutter = subset.Subsetter(options)
        cutter.populate(unicodes=codepoints)
        cutter.subset(font)
        subset.save_font(font, str(target / f"{name}.woff"), options)
        written += (target / f"{name}.woff").stat().st_size
    return written


_TOKEN_RULE = re.compile(r'html\[data-theme="(\w+)"\] \.highlight(?: \.(\w+))? \{([^}]*)\}')


def plain_token_classes(pygments_css: str) -> set[str]:
    """The classes of code tokens drawn exactly as a code block's own text in every colour mode
    (pydata's ``pygments.css``: same colour, nothing else), whose ``<span>`` adds nothing.

    >>> plain_token_classes('html[data-theme="light"] .highlight { background: #fff; color: #000 }'
    ...                     'html[data-theme="light"] .highlight .n { color: #000 }'
    ...                     'html[data-theme="light"] .highlight .k { color: #00f }')
    {'n'}
    """
    text: dict[str, str] = {}
    tokens: dict[str, dict[str, str]] = {}
    for theme, cls, declarations in _TOKEN_RULE.findall(pygments_css):
        if cls:
            tokens.setdefault(cls, {})[theme] = declarations.strip()
        else:
            text[theme] = re.sub(r"background:[^;]*;\s*", "", declarations.strip())
    return {cls for cls, rules in tokens.items()
            if text and rules.keys() == text.keys() and all(rules[t] == text[t] for t in text)}


_PRE = re.compile(r"<pre>.*?</pre>", re.DOTALL)


def unwrap_plain_tokens(page: str, classes: set[str]) -> str:
    """``page`` with the code tokens of ``classes`` as bare text in its ``<pre>`` blocks.

    >>> unwrap_plain_tokens('<pre><span class="n">x</span><span class="o">=</span></pre>', {"n"})
    '<pre>x<span class="o">=</span></pre>'
    """
    if not classes:
        return page
    names = "|".join(map(re.escape, sorted(classes)))
    span = re.compile(rf'<span class="(?:{names})">([^<]*)</span>')
    return _PRE.sub(lambda pre: span.sub(r"\1", pre.group(0)), page)


def css_words(texts: Iterable[str]) -> set[str]:
    r"""Every word (``[\w-]+``) of ``texts``: the names a page or a script may give an element."""
    return {word for text in texts for word in re.findall(r"[\w-]+", text)}


#: Classes that Bootstrap's scripts compose at run time (``bs-tooltip-auto``, ...): always kept.
DYNAMIC_PREFIXES = ("bs-",)


def _selectors(prelude: list[Any]) -> list[list[Any]]:
    """A rule's selector list split at its top-level commas (``:is(a, b)`` stays whole)."""
    out: list[list[Any]] = [[]]
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            out.append([])
        else:
            out[-1].append(token)
    return out


def _may_match(selector: list[Any], words: set[str]) -> bool:
    """False when the selector names a class or id that no page or script holds (what is inside
    ``:not()``, ``:is()`` and attribute selectors is not required)."""
    previous = None
    for token in selector:
        name = None
        if token.type == "ident" and previous is not None and previous.type == "literal" \
                and previous.value == ".":
            name = token.value
        elif token.type == "hash":
            name = token.value
        if name is not None and name not in words and not name.startswith(DYNAMIC_PREFIXES):
            return False
        previous = token
    return True


def purge_css(css: str, words: set[str]) -> str:
    """``css`` without the selectors that can match no element of the site (PurgeCSS's rule):
    states (``:hover``, ``:focus``, dark mode) of elements that exist are kept, and so are the
    classes the site's scripts add (every word of the scripts is in ``words``).

    >>> purge_css('.a,.gone{x:1}.gone:hover{y:2}@media (min-width:1px){.a:focus{z:3}}'
    ...           '@font-face{src:url(f)}', {"a"})
    '.a{x:1}@media (min-width:1px){.a:focus{z:3}}@font-face{src:url(f)}'
    """
    import tinycss2  # type: ignore[import-untyped]

    out = []
    for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
        if rule.type == "qualified-rule":
            kept = [tinycss2.serialize(s).strip() for s in _selectors(rule.prelude)
                    if _may_match(s, words)]
            if kept:
                out.append(f"{','.join(kept)}{{{tinycss2.serialize(rule.content)}}}")
        elif rule.type == "at-rule" and rule.content is not None \
                and rule.lower_at_keyword in ("media", "supports", "layer", "container"):
            inner = purge_css(tinycss2.serialize(rule.content), words)
            if inner:
                out.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{inner}}}")
        elif rule.type == "at-rule":
            out.append(rule.serialize())
    return "".join(out)


def without_unused(assets: Iterable[Any], body: str) -> list[Any]:
    """Script or CSS assets minus MathJax's (the formulas are typeset at build time), sphinx-thebe's
    (files and inline configuration: no live-code button is configured) and, on a page without
    its components, sphinx-design's."""
    design = 'class="sd-' in body

    def unused(asset: Any) -> bool:
        name = str(getattr(asset, "filename", asset) or "").lower()
        text = str(getattr(asset, "attributes", {}).get("body", "")).lower()
        return ("thebe" in name or "thebe" in text or "mathjax" in name or "mathjax" in text
                or (not design and ("sphinx-design" in name or "design-tabs" in name)))
    return [a for a in assets if not unused(a)]


# ---------------------------------------------------------------------------------------------
# Sphinx hooks.
# ---------------------------------------------------------------------------------------------

def add_theme_and_styles(app: Sphinx, config: Any) -> None:
    """Our templates before the theme's, our stylesheet after the theme's."""
    config.templates_path.insert(0, str(HERE / "theme" / "components"))
    config.templates_path.insert(0, str(HERE / "theme"))
    config.html_static_path.append(str(HERE / "static"))
    app.add_css_file("course-pages.css", priority=900)


def matplotlibrc(rc: dict[str, Any]) -> str:
    r"""A matplotlibrc file's text setting ``rc`` (plain values: sizes, names).

    >>> matplotlibrc({"font.size": 11.0})
    'font.size: 11.0\n'
    """
    return "".join(f"{key}: {value}\n" for key, value in rc.items())


def course_plot_text(app: Sphinx, config: Any) -> None:
    """Every chapter the build executes draws its plots' text at the course style's sizes
    (``course_lib.plotting.course_text_rc``): a matplotlibrc named by ``MATPLOTLIBRC``, which the
    notebooks' kernels inherit; the phone check (``MIN_LABEL_PX``) relies on it."""
    from course_lib.plotting import course_text_rc

    path = Path(app.outdir).parent / "course-matplotlibrc"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(matplotlibrc({str(k): v for k, v in course_text_rc().items()}),
                    encoding="utf-8")
    os.environ["MATPLOTLIBRC"] = str(path)


def _text_pt() -> float:
    from course_lib.plotting import smallest_text_pt

    return smallest_text_pt()


def _image_sources(app: Sphinx) -> dict[str, Path]:
    """``{name under _images/: source file}`` for the images Sphinx copies."""
    cached: dict[str, Path] | None = getattr(app, "_course_image_sources", None)
    if cached is None:
        cached = {unique: Path(app.srcdir) / source
                  for source, (_docs, unique) in app.env.images.items()}
        app._course_image_sources = cached  # type: ignore[attr-defined]
    return cached


def rewrite_page(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                 doctree: Any) -> None:
    """Citations as a list, equations and plots in their boxes, no unused assets."""
    body = context.get("body") or ""
    context["script_files"] = without_unused(context.get("script_files", []), body)
    context["css_files"] = without_unused(context.get("css_files", []), body)
    if not body:
        return
    sources, text_pt = _image_sources(app), _text_pt()

    def info(src: str) -> tuple[int, int, float] | None:
        source = sources.get(PurePosixPath(src).name)
        return png_info(source) if source is not None else None

    context["body"] = mark_plots(wrap_display_math(citations_as_list(body)), info, text_pt)


def typeset_page(path: Path, outdir: Path, macros: dict[str, str]) -> list[str]:
    """The written page ``path`` with every formula typeset (MathJax in Node): its body, its
    table of contents and links alike; their stylesheet (only the characters the page draws)
    goes in its head. Returns what MathJax could not typeset. A page typeset before (an
    incremental build) has no formula left and is not touched."""
    page = path.read_text(encoding="utf-8")
    if not _FORMULA.search(page):
        return []
    fonts = Path(os.path.relpath(outdir / MATH_FONTS, path.parent)).as_posix()
    render = node_renderer(macros, fonts)
    problems: list[str] = []

    def checked(formulas: list[tuple[str, bool]]) -> tuple[list[str], str]:
        typeset, css = render(formulas)
        problems.extend(math_problems(formulas, typeset))
        return typeset, css

    page, css = typeset_formulas(page, checked)
    path.write_text(page.replace("</head>", f"<style>{css}</style>\n</head>", 1),
                    encoding="utf-8")
    return problems


def typeset_site(app: Sphinx, outdir: Path) -> None:
    """Every written page typeset (``typeset_page``); each formula MathJax could not typeset is a
    warning on its page."""
    macros = (app.config.mathjax3_config or {}).get("tex", {}).get("macros", {})
    for path in sorted(outdir.rglob("*.html")):
        for problem in typeset_page(path, outdir, macros):
            LOGGER.warning(f"course_pages: {problem}", location=path.relative_to(outdir).as_posix())


def lighten_assets(app: Sphinx, exception: Exception | None) -> None:
    """Once the images and static files are copied (after pydata's ``pygments.css``): PNG plots
    re-encoded with a palette when smaller, formulas typeset, code tokens without their plain
    spans, the icon fonts cut to the icons the pages use, and the stylesheets purged of rules no
    element can match."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    typeset_site(app, out)
    saved = sum(palette_png(p) for p in (out / "_images").glob("*.png") if png_info(p) is not None)
    LOGGER.info(f"course_pages: plots re-encoded with a palette, {saved / 1e6:.2f} MB saved")
    classes = plain_token_classes((out / "_static" / "pygments.css").read_text(encoding="utf-8"))
    pages = {path: unwrap_plain_tokens(path.read_text(encoding="utf-8"), classes)
             for path in out.rglob("*.html")}
    for path, page in pages.items():
        path.write_text(page, encoding="utf-8")
    theme_css = out / "_static" / "styles" / "pydata-sphinx-theme.css"
    css = theme_css.read_text(encoding="utf-8")
    size = subset_icon_fonts(out, icon_codepoints(css, pages.values()))
    theme_css.write_text(trim_icon_rules(css, icon_names(pages.values())), encoding="utf-8")
    LOGGER.info(f"course_pages: icon fonts cut to the icons the pages use, {size / 1e3:.0f} kB")
    scripts = [p.read_text(encoding="utf-8", errors="replace") for p in out.rglob("*.js")]
    words = css_words([*pages.values(), *scripts])
    before = after = 0
    for sheet in (out / "_static").rglob("*.css"):
        css = sheet.read_text(encoding="utf-8")
        purged = purge_css(css, words)
        sheet.write_text(purged, encoding="utf-8")
        before, after = before + len(css), after + len(purged)
    LOGGER.info(f"course_pages: stylesheets purged, {before / 1e3:.0f} -> {after / 1e3:.0f} kB")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", add_theme_and_styles)
    app.connect("config-inited", course_plot_text)
    app.connect("html-page-context", rewrite_page, priority=600)
    # After pydata-sphinx-theme's own build-finished handler, which writes pygments.css.
    app.connect("build-finished", lighten_assets, priority=800)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
