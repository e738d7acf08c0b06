"""Loading an instructor's page in Debian's headless Chromium and looking for what a learner's markup did there
(tests/grader/test_inert_pages.py; the hub's Formgrader page, tests/support/hub_browser.py): the test's own HTTP server
that records every payload calling home (``LeakServer``), ``probe`` (every request recorded, MathJax's CDN answered
from a local copy or a stub, every ``javascript:`` link clicked, what ran), ``assert_inert`` (nothing ran, called
home or loaded; the learner's legitimate answer still shows), and the requests Formgrader's page makes itself.
"""
from __future__ import annotations

import mimetypes
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from learner_lab import CHROMIUM, CHROMIUM_ARGS

MATHJAX_PREFIX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
MATHJAX_STUB = ("window.MathJax = {Hub: {Startup: {signal: {Interest: function () {}}}, Queue: function () {}, "
                "Config: function () {}}};")


def mathjax_dir() -> Path | None:
    """A local copy of MathJax 2.7 (the folder holding MathJax.js) to answer the CDN's requests with, so that the
    test sees MathJax typeset the learner's math under the page's policy: $TRITONCOURSE_MATHJAX_DIR, or PyPI's
    jupyter-server-mathjax when it is installed. Without one, MathJax.js is answered by a stub (these machines
    are offline) and the math is checked as its TeX source."""
    folder = os.environ.get("TRITONCOURSE_MATHJAX_DIR")
    if not folder:
        try:
            import jupyter_server_mathjax
        except ImportError:
            return None
        folder = str(Path(jupyter_server_mathjax.__file__).parent / "static")
    return Path(folder) if (Path(folder) / "MathJax.js").is_file() else None


LEGIT = ["My answer: the kernel is", "memory bound", "learner html table", "learner md output",
         "stdout says <script>hi</script>"]


# ------------------------------------------------------------------ the test's own server that records leaks

class LeakServer:
    """HTTP on 127.0.0.1 that records every request path; for payloads that call home."""

    def __init__(self):
        hits: list[str] = []
        self.hits = hits

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                if len(hits) < 1000:
                    hits.append(self.path)
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_OPTIONS = _record

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 1
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ------------------------------------------------------------------ loading a page and looking for marks

def probe(url: str, leak: LeakServer, same_origin_ok=lambda path: True, act=None, login: str | None = None,
          storage_state: dict | None = None) -> dict:
    """Load ``url`` in headless Chromium and report what ran and what was requested.

    Every request is recorded; requests to the test's server go through (so that it records them), MathJax's
    CDN and every other host are answered 404 / aborted (offline). After the load, every ``javascript:`` link
    still in the page is clicked. ``act(page)`` may then do more in the page (e.g. grade). ``login``: a URL
    loaded first (Jupyter's token login, which sets the session cookie for the whole server); ``storage_state``: a
    logged-in Playwright context's cookies (tests/system/test_hub.py: the instructor's JupyterHub log-in)."""
    from playwright.sync_api import sync_playwright

    page_origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    requests, errors, blocked, console = [], [], [], []
    local_mathjax = mathjax_dir()
    before = len(leak.hits)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900}, storage_state=storage_state)
            page.set_default_timeout(20_000)
            page.on("pageerror", lambda err: errors.append(str(err)))

            def route(r):
                target = r.request.url
                if target.startswith(leak.url) or target.startswith(page_origin) or target.startswith(("data:",)):
                    r.continue_()
                elif target.startswith(MATHJAX_PREFIX):
                    rel = urlsplit(target).path.split("/mathjax/", 1)[1].split("/", 1)[-1]  # after the version
                    file = (local_mathjax / rel) if local_mathjax else None
                    if file and file.is_file() and local_mathjax in file.resolve().parents:
                        r.fulfill(status=200, body=file.read_bytes(),
                                  content_type=mimetypes.guess_type(file.name)[0] or "application/octet-stream")
                    elif rel == "MathJax.js":
                        r.fulfill(status=200, body=MATHJAX_STUB, content_type="application/javascript")
                    else:
                        r.fulfill(status=404, body="offline")
                else:
                    r.abort()

            page.route("**/*", route)
            if login:
                page.goto(login)
            page.on("request", lambda req: requests.append(req.url))
            page.on("requestfailed", lambda req: blocked.append(req.url) if "BLOCKED_BY_CSP" in (req.failure or "")
                    else None)
            page.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
            page.goto(url, wait_until="load")
            page.wait_for_timeout(3000 if local_mathjax else 1500)  # onerror, ontoggle, SVG animations, MathJax
            title_before_clicks = page.title()
            clicked = 0
            for link in page.locator("a[href^='javascript:' i]").all():
                try:
                    link.click(timeout=2000, force=True)
                    clicked += 1
                except Exception:  # noqa: BLE001 - a hidden link is still a link: call it the way a click would
                    link.evaluate("a => a.click()")
                    clicked += 1
            page.wait_for_timeout(500)
            acted = act(page) if act else None
            marks = []
            for frame in page.frames:
                try:
                    marks += frame.evaluate("() => window.__pwned || []")
                except Exception:  # noqa: BLE001 - a cross-origin or gone frame
                    pass
            report = {
                "title": title_before_clicks, "title_after": page.title(), "marks": marks, "clicked": clicked,
                "text": page.inner_text("body"), "errors": errors, "acted": acted,
                "images": page.evaluate("() => [...document.images].map(i => [i.src.slice(0, 30), i.naturalWidth])"),
                "csp": page.evaluate("() => [...document.querySelectorAll('meta[http-equiv]')]"
                                     ".map(m => m.getAttribute('content'))"),
                "html": page.content(), "mathjax": bool(local_mathjax),
                "typeset": page.evaluate("() => document.querySelectorAll('.MathJax, .MathJax_Display').length"),
            }
        finally:
            browser.close()
    time.sleep(0.3)  # a last in-flight request
    report["leaks"] = leak.hits[before:]
    report["requests"], report["blocked"] = requests, blocked
    report["csp_violations"] = [m for m in console if "Content Security Policy" in m]
    blocked += [m.group(1) for v in report["csp_violations"] if (m := re.search(r"Loading the \w+ '([^']+)'", v))]
    # a request the page's policy blocked never left it (Chromium still reports it as a request)
    report["foreign"] = [r for r in requests if r not in blocked and not (
        r.startswith("data:") or r.startswith(MATHJAX_PREFIX)
        or (r.startswith(page_origin) and same_origin_ok(urlsplit(r).path)))]
    return report


def assert_inert(report: dict, page: str) -> None:
    problems = []
    if report["marks"]:
        problems.append(f"payloads ran: {sorted(set(map(str, report['marks'])))}")
    if "PWNED" in (report["title"], report["title_after"]):
        problems.append("a payload set document.title")
    if report["leaks"]:
        problems.append(f"the test's server was reached: {sorted(set(report['leaks']))}")
    if report["foreign"]:
        problems.append(f"requests left the page: {sorted(set(report['foreign']))[:20]}")
    # With the markup sanitized, the policy has nothing of the learner's to block; what it may block is nbgrader's
    # own: the feedback page's Bootstrap CSS names Glyphicons fonts it never ships, and MathJax probes for fonts
    # with an about:blank one.
    stopped = [m for m in report["csp_violations"] if "glyphicons-halflings" not in m and "'about:blank'" not in m]
    if stopped:
        problems.append(f"the page's Content-Security-Policy had to block: {stopped[:5]}")
    text = report["text"]
    missing = [t for t in LEGIT if t not in text]
    if missing:
        problems.append(f"the learner's legitimate content is missing: {missing}")
    html = report["html"]
    for tag in ("<strong>memory bound</strong>", "<code>x</code>", "<b>learner html table</b>"):
        if tag not in html:
            problems.append(f"{tag} is not rendered")
    if report["mathjax"]:
        if not report["typeset"]:
            problems.append("MathJax did not typeset the learner's $O(n)$")
    elif "$O(n)$" not in text:
        problems.append("the learner's math $O(n)$ is missing")
    if not any(src.startswith("data:image/png") and width > 0 for src, width in report["images"]):
        problems.append(f"the learner's PNG plot does not show: {report['images']}")
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)


def _formgrader_paths(path: str) -> bool:
    """Same-origin requests Formgrader's page makes itself: its static files and its grading API."""
    return path.startswith(("/formgrader/static/", "/formgrader/api/", "/formgrader/submissions/",
                            "/favicon.ico", "/static/favicons/"))
