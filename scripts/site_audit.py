"""Audit the built website as readers with a keyboard, a screen reader or a phone meet it.

Runs in the browser that ``scripts/site_browser.py`` drives (one Chromium for every page and both
widths). Each page is loaded at the desktop width and at a phone's (390 CSS px), and checked for:

* **WCAG 2.0/2.1 A and AA** with axe-core (vendored by the Makefile from npm into
  ``_build/vendor/axe/axe.min.js``, injected into the page): every violation, the theme's and
  docutils' markup included;
* **visible keyboard focus**: every element a reader can Tab to (and the items of the header's
  drop-down menus, opened) looks different when focused: an outline, a shadow, a border or a
  background appears; and no formula is a Tab stop of its own while its MathML stays readable;
* **figures** (chapter pages): every plot has its own text alternative (not empty, not a file name,
  not a generic fallback), and no image is shown twice on a page (same address or same bytes);
* **phones**: nothing makes the page scroll sideways at 390 px, and the smallest text of every
  plot is at least ``MIN_LABEL_PX`` px on screen: the plot's displayed width over its pixel width,
  times the course style's smallest font in px at the figure's dpi (from the PNG);
* **weight**: a chapter's first visit loads at most ``MAX_CHAPTER_BYTES`` (every request until the
  page is loaded and idle, bodies uncompressed).

    python scripts/site_audit.py _build/html            # one line per page; exit 1 on any problem

The checks' verdicts are plain functions of what the page reported, unit-tested on tiny pages with
each defect in tests/test_site.py.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: axe-core, installed by the Makefile (``npm install axe-core@<pinned>``, no browser download).
AXE = ROOT / "_build" / "vendor" / "axe" / "axe.min.js"
#: The rules axe runs: WCAG 2.0 and 2.1, levels A and AA.
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
#: The widths every page is checked at (CSS px): a desktop window and a phone (iPhone 12 to 15).
DESKTOP, PHONE = 1280, 390
#: The smallest text of a plot on a phone's screen (px).
MIN_LABEL_PX = 9.0
#: A chapter page's first visit, every request until idle (bytes, uncompressed): at most 1.5 MB
#: as issue 23 asks, in decimal megabytes (1,500,000 bytes, not 1.5 MiB). The pages now load
#: 0.7 to 1.0 MB (from 4.2 to 4.6 MB before the issue): formulas are typeset at build time (no
#: MathJax script), the stylesheets are purged of rules no element matches, and code loses the
#: spans of tokens drawn as plain text (_ext/course_pages.py).
MAX_CHAPTER_BYTES = 1_500_000
#: Text alternatives that describe nothing: the extension's old fallback, and file names.
GENERIC_ALT = ("A figure drawn by the code cell above",)

_AXE_RUN = """
(async () => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: %s},
                                          resultTypes: ["violations"]});
  return result.violations.map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.length,
                                      targets: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
})()
"""

# Every element a reader can Tab to, plus the items of each drop-down menu (opened in turn),
# focused one after another: what changes in its look. A formula's container counted apart.
_FOCUS = """
(async () => {
  const TABBABLE = 'a[href], button:not([disabled]), input:not([disabled]):not([type="hidden"]),'
    + ' select:not([disabled]), textarea:not([disabled]), summary, [tabindex]';
  const PROPS = ["outline-style", "outline-width", "outline-color", "box-shadow",
                 "border-top-color", "border-bottom-color", "border-top-width",
                 "background-color", "text-decoration-line"];
  const shown = el => {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && el.tabIndex >= 0;
  };
  const look = el => {
    const s = getComputedStyle(el);
    return PROPS.map(p => s.getPropertyValue(p));
  };
  const transparent = c => /rgba\\(.*,\\s*0\\)$/.test(c) || c === "transparent";
  const ring = v => v[0] !== "none" && parseFloat(v[1]) > 0 && !transparent(v[2]);
  const name = el => (el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.className && typeof el.className === "string"
       ? "." + el.className.trim().split(/\\s+/).slice(0, 3).join(".") : "")
    + " '" + (el.getAttribute("aria-label") || el.textContent || "").trim().slice(0, 40) + "'");
  const invisible = [];
  let checked = 0;
  const check = els => {
    const before = els.map(look);
    els.forEach((el, i) => {
      el.focus({preventScroll: true});
      if (document.activeElement !== el) { return; }
      checked += 1;
      const after = look(el);
      const changed = after.some((v, k) => k > 2 && v !== before[i][k]);
      if (!ring(after) && !changed) { invisible.push(name(el)); }
    });
  };
  const math = Array.from(document.querySelectorAll("mjx-container"));
  check(Array.from(document.querySelectorAll(TABBABLE))
        .filter(el => shown(el) && !el.closest(".dropdown-menu")
                && el.tagName !== "MJX-CONTAINER"));
  for (const toggle of document.querySelectorAll('[data-bs-toggle="dropdown"]')) {
    if (!shown(toggle)) { continue; }
    toggle.click();
    await new Promise(r => setTimeout(r, 50));
    const menu = toggle.parentElement.querySelector(".dropdown-menu");
    if (menu) { check(Array.from(menu.querySelectorAll(TABBABLE)).filter(shown)); }
    toggle.click();
  }
  document.activeElement && document.activeElement.blur();
  return {checked, invisible, math: math.length,
          math_tab_stops: math.filter(m => m.tabIndex >= 0).length,
          math_unreadable: math.filter(m => !m.querySelector("mjx-assistive-mml math")).length};
})()
"""

# At a phone's width: does the page scroll sideways, and what sticks out (outermost first)?
_LAYOUT = """
(() => {
  const width = document.documentElement.clientWidth;
  const clips = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") { return true; } } return false; };
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    // Its box, or its content where that overflows the box (a long word in a heading).
    const right = getComputedStyle(el).overflowX === "visible"
      ? Math.max(r.right, r.left + el.scrollWidth) : r.right;
    if (r.width === 0 || right <= width + 1 || clips(el)) { continue; }
    if (getComputedStyle(el).position === "fixed") { continue; }
    if (out.some(o => o.el.contains(el))) { continue; }
    out.push({el, text: el.tagName.toLowerCase() + "." + String(el.className).split(" ")[0]
              + " '" + (el.textContent || "").trim().slice(0, 50) + "' right edge "
              + Math.round(right) + " px"});
  }
  return {width, scroll_width: document.documentElement.scrollWidth,
          sticking_out: out.slice(0, 8).map(o => o.text)};
})()
"""

# The plots of a page (notebook output images) as laid out now.
_FIGURES = """
Array.from(document.querySelectorAll(".cell_output img, .output img")).map(img => ({
  src: img.currentSrc || img.src, alt: img.getAttribute("alt"), natural: img.naturalWidth,
  shown: img.getBoundingClientRect().width}))
"""


@dataclass
class Audit:
    """What the audit found on one page, by check (each a list of readable problems)."""

    page: str
    axe: list[str] = field(default_factory=list)
    focus: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    phone: list[str] = field(default_factory=list)
    weight: list[str] = field(default_factory=list)
    #: Measurements shown in the summary line: bytes, requests, smallest label px, ...
    measured: dict[str, Any] = field(default_factory=dict)
    #: What the desktop load found (site_browser's checks: console, requests, math, images).
    report: Any = None

    @property
    def problems(self) -> list[str]:
        return self.axe + self.focus + self.figures + self.phone + self.weight


# ------------------------------------------------------------------ verdicts (plain functions)

def axe_problems(violations: Sequence[dict[str, Any]]) -> list[str]:
    """One line per axe violation: rule, impact, how many nodes, where.

    >>> axe_problems([{"id": "image-alt", "impact": "critical", "nodes": 2, "targets": ["img"]}])
    ['axe image-alt (critical, 2 nodes): img']
    """
    return [f"axe {v['id']} ({v['impact']}, {v['nodes']} nodes): {', '.join(v['targets'])}"
            for v in violations]


def focus_problems(found: dict[str, Any]) -> list[str]:
    """Elements without a visible focus indicator; formulas that are Tab stops or unreadable."""
    out = [f"no visible focus: {name}" for name in found["invisible"]]
    if found["math_tab_stops"]:
        out.append(f"{found['math_tab_stops']} of {found['math']} formulas are Tab stops")
    if found["math_unreadable"]:
        out.append(f"{found['math_unreadable']} of {found['math']} formulas have no MathML "
                   "for screen readers")
    return out


def image_digest(url: str) -> str:
    """SHA-256 of an image's bytes (``http:`` or ``data:`` URL)."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        return hashlib.sha256(answer.read()).hexdigest()


def figure_problems(figures: Sequence[dict[str, Any]], digests: dict[str, str]) -> list[str]:
    """Plots without their own text alternative, and plots shown twice (same URL or bytes).

    >>> figure_problems([{"src": "a.png", "alt": "loss falls"}, {"src": "b.png", "alt": ""}],
    ...                 {"a.png": "1", "b.png": "1"})
    ['no text alternative: b.png', 'shown twice: b.png (same image as a.png)']
    """
    out: list[str] = []
    first: dict[str, str] = {}
    for fig in figures:
        alt = (fig.get("alt") or "").strip()
        if not alt or alt.lower().endswith((".png", ".svg", ".jpg", ".jpeg")):
            out.append(f"no text alternative: {fig['src']}")
        elif alt.startswith(GENERIC_ALT):
            out.append(f"generic text alternative: {fig['src']}: {alt[:80]}")
    for fig in figures:
        key = digests.get(fig["src"], fig["src"])
        if key in first:
            out.append(f"shown twice: {fig['src']} (same image as {first[key]})")
        else:
            first[key] = fig["src"]
    return out


def png_dpi(data: bytes) -> float | None:
    """The dots per inch a PNG records (its pHYs chunk, as matplotlib writes it), or None."""
    from PIL import Image

    try:
        dpi = Image.open(io.BytesIO(data)).info.get("dpi")
    except OSError:
        return None
    return float(dpi[0]) if dpi else None


def label_px(shown: float, natural: int, dpi: float, text_pt: float) -> float:
    """On-screen size (px) of text drawn at ``text_pt`` points in an image of ``dpi``, ``natural``
    pixels wide, shown ``shown`` CSS px wide.

    >>> round(label_px(shown=300, natural=600, dpi=100, text_pt=10), 2)
    6.94
    """
    return shown / natural * text_pt * dpi / 72.0


def phone_problems(layout: dict[str, Any], labels: dict[str, float],
                   min_px: float = MIN_LABEL_PX) -> list[str]:
    """Sideways scrolling at a phone's width, and plots whose smallest text is under ``min_px``.

    >>> phone_problems({"width": 390, "scroll_width": 500, "sticking_out": ["pre.x"]},
    ...                {"a.png": 9.5, "b.png": 4.2})
    ['scrolls sideways: 500 px of content in 390 px: pre.x', 'plot text 4.2 px < 9 px: b.png']
    """
    out = []
    if layout["scroll_width"] > layout["width"]:
        out.append(f"scrolls sideways: {layout['scroll_width']} px of content in "
                   f"{layout['width']} px: {'; '.join(layout['sticking_out'])}")
    out += [f"plot text {px:.1f} px < {min_px:g} px: {src}" for src, px in labels.items()
            if px < min_px]
    return out


def weight_problems(bytes_loaded: int, requests: int, limit: int = MAX_CHAPTER_BYTES) -> list[str]:
    """A first visit heavier than ``limit`` bytes.

    >>> weight_problems(2_500_000, 40)
    ['first visit loads 2.50 MB in 40 requests (at most 1.50 MB)']
    """
    if bytes_loaded <= limit:
        return []
    return [(f"first visit loads {bytes_loaded / 1e6:.2f} MB in {requests} requests "
             f"(at most {limit / 1e6:.2f} MB)")]


# ------------------------------------------------------------------ in the browser

def smallest_text_pt() -> float:
    """The smallest font (points) of the course's figure style (``course_lib.plotting``)."""
    from course_lib.plotting import smallest_text_pt as style_pt

    return style_pt()


def run_axe(browser: Any, axe_js: str) -> list[dict[str, Any]]:
    """axe-core's WCAG A/AA violations on the page loaded in ``browser``."""
    if not browser.evaluate("typeof axe !== 'undefined'"):
        browser.evaluate(axe_js + "\n;0")
    return browser.evaluate(_AXE_RUN % list(AXE_TAGS))  # type: ignore[no-any-return]


def press_tab(browser: Any) -> None:
    """One Tab key press: the page now takes focus as from a keyboard."""
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key="Tab", code="Tab",
                     windowsVirtualKeyCode=9)


def measure_labels(figures: Iterable[dict[str, Any]], text_pt: float,
                   blobs: dict[str, bytes]) -> dict[str, float]:
    """``{src: on-screen px of the smallest text}`` for the PNG plots among ``figures`` (an image
    shown several times: its smallest)."""
    out: dict[str, float] = {}
    for fig in figures:
        dpi = png_dpi(blobs[fig["src"]]) if fig["src"] in blobs else None
        if dpi and fig["natural"]:
            px = label_px(fig["shown"], fig["natural"], dpi, text_pt)
            out[fig["src"]] = min(px, out.get(fig["src"], px))
    return out


def _fetch(srcs: Iterable[str]) -> dict[str, bytes]:
    out = {}
    for src in set(srcs):
        with urllib.request.urlopen(src, timeout=30) as answer:
            out[src] = answer.read()
    return out


def audit_page(browser: Any, url: str, page: str, *, axe_js: str, text_pt: float,
               chapter: bool, screenshot: Path | None = None) -> Audit:
    """Load ``url`` at the desktop width (with a screenshot), then at the phone's, and run every
    check; ``chapter``: also the figure and weight checks."""
    audit = Audit(page)
    browser.set_width(DESKTOP)
    report = audit.report = browser.load(url, screenshot)
    audit.axe += [f"{DESKTOP} px: {p}" for p in axe_problems(run_axe(browser, axe_js))]
    press_tab(browser)  # focus from the keyboard from now on (what :focus-visible shows)
    audit.focus += focus_problems(browser.evaluate(_FOCUS))
    figures = browser.evaluate(_FIGURES)
    blobs = _fetch(f["src"] for f in figures)
    digests = {src: hashlib.sha256(data).hexdigest() for src, data in blobs.items()}
    if chapter:
        audit.figures += figure_problems(figures, digests)
        audit.weight += weight_problems(report.bytes_loaded, report.requests)
    audit.measured.update(bytes=report.bytes_loaded, requests=report.requests)
    browser.set_width(PHONE)
    browser.load(url)
    audit.axe += [f"{PHONE} px: {p}" for p in axe_problems(run_axe(browser, axe_js))]
    labels = measure_labels(browser.evaluate(_FIGURES), text_pt, blobs)
    audit.phone += phone_problems(browser.evaluate(_LAYOUT), labels)
    audit.measured["label_px"] = min(labels.values(), default=None)
    browser.set_width(DESKTOP)
    return audit


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_links import site_pages
    from site_browser import Chromium, serve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--axe", type=Path, default=AXE, help="axe.min.js (the Makefile's)")
    parser.add_argument("--only", default="", help="audit only pages whose path contains this")
    args = parser.parse_args(argv)
    axe_js, text_pt = args.axe.read_text(encoding="utf-8"), smallest_text_pt()
    problems = 0
    with serve(args.site) as base, Chromium() as browser:
        for html in site_pages(args.site):
            page = html.relative_to(args.site).as_posix()
            if args.only not in page:
                continue
            audit = audit_page(browser, base + page, page, axe_js=axe_js, text_pt=text_pt,
                               chapter=page.startswith("chapters/"))
            problems += len(audit.problems)
            label = audit.measured["label_px"]
            print(f"{page}: {audit.measured['bytes'] / 1e6:.2f} MB in "
                  f"{audit.measured['requests']} requests, smallest plot text at {PHONE} px: "
                  f"{'-' if label is None else f'{label:.1f} px'}, {len(audit.problems)} problems")
            for line in audit.problems:
                print(f"    {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
