"""Check the links of a built website: every local href/src exists, every #anchor exists in its
page.

External links (http, https, mailto, ...) are listed, never fetched: the site must work offline and
a test must not depend on other people's servers.

    python scripts/check_links.py _build/html             # prints broken links, exit 1 if any
    python scripts/check_links.py _build/html --external  # also lists the external links
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

#: Attributes that point at another resource, by tag.
LINK_ATTRS = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src",
              "iframe": "src", "area": "href"}
#: Schemes that leave the site (listed) and schemes that are not resources at all (ignored).
EXTERNAL_SCHEMES = {"http", "https", "mailto", "ftp", "tel"}
IGNORED_SCHEMES = {"javascript", "data", "blob", "about"}


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])  # type: ignore[arg-type]
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])  # type: ignore[arg-type]
        attr = LINK_ATTRS.get(tag)
        if attr and values.get(attr) is not None:
            self.links.append((tag, values[attr].strip()))  # type: ignore[union-attr]


@dataclass
class Report:
    """What a check found: ``broken`` says page, link and why; ``external`` is every URL seen."""

    pages: int = 0
    links: int = 0
    broken: list[str] = field(default_factory=list)
    external: set[str] = field(default_factory=set)


def _parse(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def site_pages(root: Path) -> list[Path]:
    """The pages of a built site: its HTML files outside the asset folders (``_static``, ...).

    Themes ship Jinja macro files named ``*.html`` in ``_static``; they are not pages.
    """
    return sorted(p for p in root.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(root).parts[:-1]))


def check_site(root: Path) -> Report:
    """Check every page under ``root`` (a built site)."""
    root = root.resolve()
    if not (root / "index.html").is_file() and not any(root.glob("*.html")):
        raise FileNotFoundError(f"{root} holds no HTML pages: build the site first")
    parsed: dict[Path, _PageParser] = {}

    def page(path: Path) -> _PageParser:
        if path not in parsed:
            parsed[path] = _parse(path)
        return parsed[path]

    report = Report()
    for html in site_pages(root):
        report.pages += 1
        rel = PurePosixPath(html.relative_to(root).as_posix())
        for tag, url in page(html).links:
            report.links += 1
            problem = _check(root, html, url, page)
            if problem == "external":
                report.external.add(url)
            elif problem:
                report.broken.append(f"{rel}: <{tag}> {url}: {problem}")
    return report


def check_site_urls(root: Path, baseurl: str, urls: Sequence[str]) -> list[str]:
    """``url: problem`` for each of ``urls`` (absolute, under ``baseurl``, e.g. the links that the
    Colab copies make to the published site) that the built site at ``root`` does not resolve."""
    root = root.resolve()
    parsed: dict[Path, _PageParser] = {}

    def page(path: Path) -> _PageParser:
        if path not in parsed:
            parsed[path] = _parse(path)
        return parsed[path]

    problems = []
    for url in urls:
        if not url.startswith(baseurl):
            problems.append(f"{url}: not under the site's address {baseurl}")
            continue
        problem = _check(root, root / "index.html", url[len(baseurl):], page)
        if problem:
            problems.append(f"{url}: {problem}")
    return problems


def _check(root: Path, html: Path, url: str, page) -> str | None:  # type: ignore[no-untyped-def]
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in IGNORED_SCHEMES:
        return None
    if scheme in EXTERNAL_SCHEMES or url.startswith("//"):
        return "external"
    if scheme:
        return f"unknown scheme {scheme!r}"
    if not parts.path:
        target = html
    elif parts.path.startswith("/"):
        return "absolute path (breaks when the site is published under a sub-path)"
    else:
        target = (html.parent / unquote(parts.path)).resolve()
    if root not in target.parents and target != root:
        return "points outside the site"
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"missing file {target.relative_to(root).as_posix()}"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in page(target).ids:
        return f"no anchor #{fragment} in {target.relative_to(root).as_posix()}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--external", action="store_true", help="list the external links")
    args = parser.parse_args(argv)
    report = check_site(args.site)
    for line in report.broken:
        print(line)
    if args.external:
        for url in sorted(report.external):
            print(f"external (not fetched): {url}")
    print(f"{report.pages} pages, {report.links} links, {len(report.broken)} broken, "
          f"{len(report.external)} external", file=sys.stderr)
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main())
