"""Load every page of the built website in headless Chromium and report what a reader would hit.

Driven over the Chrome DevTools Protocol (``--remote-debugging-port`` and ``websocket-client``,
both already in the development environment; Debian's ``chromium``). The site is served from a
local HTTP server on 127.0.0.1 (a free port), as a reader's browser would get it. For each page:
console errors and uncaught exceptions, failed requests (network errors and HTTP status >= 400),
math typeset (at build time, or by MathJax in the page) with no error node (``mjx-merror``) and
no undefined macro, every ``<img>`` loaded with a non-zero size, the launch and download buttons
(sphinx-book-theme's header menus), the bytes and requests of a first visit (the browser cache is
off, so every load is a first load), and a full-page screenshot.
The accessibility, phone-layout, figure and weight checks live in ``scripts/site_audit.py``.

    python scripts/site_browser.py _build/html --screenshots _build/screenshots
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

#: The flags every run uses (no sandbox: containers; nothing phones home).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
WINDOW = (1280, 900)
#: A page is idle when no request has been in flight for this long (seconds).
IDLE_S = 0.5
#: A screenshot stops at this height (px): Chromium's textures are limited.
MAX_SHOT_HEIGHT = 16000

# Evaluated once the page has loaded: MathJax has typeset (the first visit's weight is taken then).
_TYPESET = """
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  return true;
})()
"""

# Evaluated in the page once it has loaded: waits for MathJax, then for every image (lazy ones
# are made eager), and returns what the checks need.
_INSPECT = """
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map(img => img.decode().catch(() => null)));
  const hrefs = selector => Array.from(document.querySelectorAll(selector)).map(a => a.href);
  return {
    title: document.title,
    mathjax: !!window.MathJax,
    math_nodes: document.querySelectorAll("mjx-container").length,
    math_errors: Array.from(document.querySelectorAll("mjx-merror"))
        .map(e => (e.getAttribute("data-mjx-error") || e.textContent).slice(0, 200)),
    // Undefined macros (red text from MathJax's noundefined package) and TeX errors, found in
    // MathJax's own math items: the rendered DOM draws characters with CSS, not text.
    math_problems: (() => {
      // Formulas typeset at build time: an undefined macro is red text in the assistive MathML.
      const out = Array.from(document.querySelectorAll('mjx-assistive-mml mtext[mathcolor="red"]'))
          .map(e => "undefined macro: " + e.textContent.slice(0, 120));
      // A formula Sphinx wrote (in the body, the table of contents, a link) and nobody typeset.
      for (const e of document.querySelectorAll("span.math, div.math")) {
        if (!e.querySelector("mjx-container")) {
          out.push("formula left as TeX: " + e.textContent.slice(0, 120));
        }
      }
      if (!(window.MathJax && MathJax.startup && MathJax.startup.document)) { return out; }
      try {
        for (const item of MathJax.startup.document.math) {
          item.root.walkTree(node => {
            if (node.isKind("merror")) { out.push("TeX error in: " + item.math.slice(0, 120)); }
            if (node.isKind("mtext") && node.attributes.get("mathcolor") === "red") {
              out.push("undefined macro in: " + item.math.slice(0, 120));
            }
          });
        }
      } catch (err) { out.push("could not inspect MathJax: " + err); }
      return out;
    })(),
    images: images.map(img => ({src: img.currentSrc || img.src, alt: img.alt,
                                complete: img.complete, width: img.naturalWidth,
                                height: img.naturalHeight})),
    // sphinx-book-theme's header menus: launch (rocket) and download buttons.
    launch: hrefs(".dropdown-launch-buttons a[href]"),
    downloads: hrefs(".dropdown-download-buttons a[href$='.ipynb']"),
    // The download item must save the file, not show it (the server's type for .ipynb is JSON).
    downloads_saved: Array.from(document.querySelectorAll(
        ".dropdown-download-buttons a[href$='.ipynb']")).map(a => a.hasAttribute("download")),
  };
})()
"""


class BrowserError(RuntimeError):
    """Chromium did not start, or did not answer the DevTools protocol in time."""


@dataclass
class PageReport:
    """What loading one page found."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    screenshot: Path | None = None
    #: Bytes of every response body (decoded, as the page uses them) and the number of requests
    #: the page made until it was loaded and idle.
    bytes_loaded: int = 0
    requests: int = 0

    @property
    def broken_images(self) -> list[str]:
        return [f"{img['src']} ({img['width']}x{img['height']}, complete={img['complete']})"
                for img in self.info.get("images", [])
                if not (img["complete"] and img["width"] > 0 and img["height"] > 0)]


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port) in a thread; yield its base URL; stop after."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class Chromium:
    """One headless Chromium with a fresh profile, driven over one page's DevTools websocket."""

    def __init__(self, binary: str = "chromium", timeout: float = 60.0) -> None:
        path = shutil.which(binary)
        if path is None:
            raise BrowserError(f"{binary} is not installed (`make sysdeps` installs chromium)")
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="site-browser-"))
        self.process = subprocess.Popen(
            [path, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self.ws = websocket.create_connection(self._page_socket(), timeout=timeout,
                                                  suppress_origin=True)
            for domain in ("Page", "Runtime", "Network", "Log"):
                self.call(f"{domain}.enable")
            self.call("Network.setCacheDisabled", cacheDisabled=True)
        except Exception:
            self.close()
            raise

    def _page_socket(self) -> str:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(f"chromium exited with status {self.process.returncode}")
            if port_file.is_file() and port_file.read_text().strip():
                port = port_file.read_text().split()[0]
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                            timeout=10) as answer:
                    pages = [t for t in json.load(answer) if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise BrowserError(f"chromium gave no DevTools page within {self.timeout:.0f} s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; keep the events that arrive meanwhile; return its result."""
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)
        raise BrowserError(f"{method}: no answer within {self.timeout:.0f} s")

    def wait_for(self, event: str, count: int = 1) -> None:
        """Until ``count`` events named ``event`` arrived since the last ``load``."""
        deadline = time.monotonic() + self.timeout
        while sum(e["method"] == event for e in self.events) < count:
            if time.monotonic() > deadline:
                raise BrowserError(f"no {event} within {self.timeout:.0f} s")
            self.events.append(json.loads(self.ws.recv()))

    def set_width(self, width: int, height: int = WINDOW[1]) -> None:
        """Lay pages out for a window ``width`` CSS px wide (a phone is 390); applies to the next
        load. Narrower than 600 px it is a phone: touch, and the page's viewport meta tag."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)

    def wait_idle(self) -> None:
        """Until no request has been in flight for ``IDLE_S`` (fonts and scripts loaded late)."""
        self.call("Runtime.evaluate", expression="0")
        deadline = time.monotonic() + self.timeout
        quiet_since = time.monotonic()
        self.ws.settimeout(IDLE_S / 5)
        try:
            while time.monotonic() < deadline:
                if not _in_flight(self.events) and time.monotonic() - quiet_since >= IDLE_S:
                    return
                try:
                    self.events.append(json.loads(self.ws.recv()))
                    quiet_since = time.monotonic()
                except websocket.WebSocketTimeoutException:
                    pass
        finally:
            self.ws.settimeout(self.timeout)
        raise BrowserError(f"requests still in flight after {self.timeout:.0f} s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def load(self, url: str, screenshot: Path | None = None) -> PageReport:
        """Load ``url``, wait for it and its math and images, and report what went wrong."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        for loads in range(2, 5):  # a redirect page navigates on: inspect where it lands
            try:
                # A first visit as a reader gets it: typeset, idle, lazy images still lazy.
                self.evaluate(_TYPESET)
                self.wait_idle()
                first_visit = _weight(self.events)
                info = self.evaluate(_INSPECT)
                break
            except BrowserError as err:
                if "navigated" not in str(err):
                    raise
                self.wait_for("Page.loadEventFired", count=loads)
        else:
            raise BrowserError(f"{url} kept navigating")
        info["final_url"] = self.evaluate("location.href")
        report = PageReport(url=url, info=info)
        self.wait_idle()  # late console messages and the images made eager arrive
        report.bytes_loaded, report.requests = first_visit
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                report.console_errors.append(" ".join(
                    str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                report.console_errors.append(
                    details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                report.console_errors.append(
                    f"{params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Network.responseReceived":
                if params["response"]["status"] >= 400:
                    report.failed_requests.append(
                        f"{params['response']['url']}: HTTP {params['response']['status']}")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                report.failed_requests.append(f"{params['requestId']}: {params.get('errorText')}")
        if screenshot is not None:
            report.screenshot = self.screenshot(screenshot)
        return report

    def screenshot(self, path: Path) -> Path:
        """The whole page (up to MAX_SHOT_HEIGHT px) as a PNG."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": max(WINDOW[0], int(size["width"])),
                "height": min(MAX_SHOT_HEIGHT, max(1, int(size["height"]))), "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip=clip)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _in_flight(events: Sequence[dict[str, Any]]) -> set[str]:
    """The requests of ``events`` that were sent and have not finished or failed yet."""
    sent, done = set(), set()
    for event in events:
        if event["method"] == "Network.requestWillBeSent":
            sent.add(event["params"]["requestId"])
        elif event["method"] in ("Network.loadingFinished", "Network.loadingFailed"):
            done.add(event["params"]["requestId"])
    return sent - done


def _weight(events: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """``(bytes, requests)``: decoded body bytes received and requests sent, over ``events``.

    >>> _weight([{"method": "Network.requestWillBeSent", "params": {"requestId": "1"}},
    ...          {"method": "Network.dataReceived", "params": {"dataLength": 300}},
    ...          {"method": "Network.dataReceived", "params": {"dataLength": 20}}])
    (320, 1)
    """
    received = sum(e["params"].get("dataLength", 0) for e in events
                   if e["method"] == "Network.dataReceived")
    sent = {e["params"]["requestId"] for e in events if e["method"] == "Network.requestWillBeSent"}
    return received, len(sent)


def search_results(browser: Chromium, base_url: str, term: str) -> list[str]:
    """The result links of the site's own search page for ``term`` (waits for the search)."""
    browser.load(f"{base_url}search.html?q={term}")
    deadline = time.monotonic() + browser.timeout
    while time.monotonic() < deadline:
        state = browser.evaluate(
            "({done: !!document.querySelector('#search-results p.search-summary, "
            "#search-results .search-summary') || /found|did not match/i.test("
            "(document.querySelector('#search-results') || {}).textContent || ''), "
            "links: Array.from(document.querySelectorAll('#search-results ul.search li a'))"
            ".map(a => a.href)})")
        if state["done"] and state["links"]:
            return state["links"]
        if state["done"]:
            time.sleep(0.5)  # the summary is written before the last results
            return browser.evaluate("Array.from(document.querySelectorAll("
                                    "'#search-results ul.search li a')).map(a => a.href)")
        time.sleep(0.2)
    raise BrowserError(f"the search for {term!r} did not finish within {browser.timeout:.0f} s")


def shot_name(page: str) -> str:
    """``chapters/01-seq2seq/seq2seq.html`` -> ``chapters--01-seq2seq--seq2seq.png``."""
    return page.removesuffix(".html").replace("/", "--") + ".png"


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_links import site_pages

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--screenshots", type=Path, help="write one PNG per page here")
    args = parser.parse_args(argv)
    problems = 0
    with serve(args.site) as base, Chromium() as browser:
        for html in site_pages(args.site):
            page = html.relative_to(args.site).as_posix()
            shot = args.screenshots / shot_name(page) if args.screenshots else None
            report = browser.load(base + page, shot)
            found = (report.console_errors + report.failed_requests + report.broken_images
                     + report.info["math_errors"] + report.info["math_problems"])
            problems += len(found)
            print(f"{page}: {report.info['math_nodes']} formulas, "
                  f"{len(report.info['images'])} images, {len(found)} problems")
            for line in found:
                print(f"    {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
