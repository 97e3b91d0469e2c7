"""The built documentation site in a real browser, and its links.

``mkdocs build`` makes the site once per module; a local HTTP server serves it.  Debian's
headless chromium (``/usr/bin/chromium``; .ci/run installs it, the browser tests are skipped
where it is missing) opens pages and the example explain report: each must render (its
content in the DOM, a screenshot), log no error to the console, and every file it asks the
server for must exist.  Every internal link and anchor of the built HTML must resolve.
"""
from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests.api.docs_pages import ROOT

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--window-size=1200,900"]
# (page, what its DOM must hold)
PAGES = [("", "magpy is a JIT compiler"), ("concepts/", 'src="../diagrams/loop.svg"'),
         ("troubleshooting/", 'id="graph-break-warning"'), ("benchmarks/", "charts/speedup.svg"),
         ("explain-report/", "explain-report.html"), ("assets/explain-report.html", 'id="timeline"')]
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[tuple[str, int]]

    def log_request(self, code="-", size="-"):
        self.requests.append((self.path, int(code) if str(code).isdigit() else 0))


@pytest.fixture(scope="module")
def server(site):
    handler = type("Handler", (_Handler,), {"requests": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", handler.requests
    httpd.shutdown()
    httpd.server_close()


def _chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=60)


@needs_chromium
@pytest.mark.parametrize("page,marker", PAGES, ids=[p or "index" for p, _ in PAGES])
def test_page_renders_without_console_errors(server, tmp_path, page, marker):
    base, requests = server
    del requests[:]
    done = _chromium(tmp_path, "--dump-dom", base + page)
    assert marker in done.stdout
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    # (the browser asks for /favicon.ico on its own where a page names no icon: the report)
    failed = [(path, code) for path, code in requests if code >= 400 and path != "/favicon.ico"]
    assert failed == [], failed


@needs_chromium
@pytest.mark.parametrize("page", ["concepts/", "assets/explain-report.html"])
def test_screenshot(server, tmp_path, page):
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", server[0] + page)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000   # (a blank page is a few KB)


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def _target(site: Path, page: Path, link: str) -> tuple[Path, str]:
    url = urllib.parse.urlsplit(link)
    path = urllib.parse.unquote(url.path)
    if path:   # (absolute paths are the site's: 404.html's)
        page = (site / path.lstrip("/") if path.startswith("/") else page.parent / path).resolve()
    base = page
    if base.is_dir():
        base = base / "index.html"
    return base, url.fragment


def test_every_internal_link_resolves(site):
    broken = []
    for page in sorted(site.rglob("*.html")):
        for link in _parsed(page).links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("//"):
                continue   # (another site: not checked here)
            target, fragment = _target(site, page, link)
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no {target})")
            elif fragment and target.suffix == ".html" and fragment not in _parsed(target).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no #{fragment})")
    assert broken == [], "\n".join(broken[:30])
