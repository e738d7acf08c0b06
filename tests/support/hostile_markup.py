"""A learner's hostile submission for the instructor's pages (tests/grader/test_inert_pages.py,
tests/grader/test_inert_markup.py, and the hub's learner C, tests/support/hub_learners.py): ``hostile_notebook``, an
autograded notebook whose outputs and markdown carry payloads that leave a mark if they run or load (``window.__pwned``,
``document.title = 'PWNED'``, or a request to the test's server), beside the learner's legitimate answer; handed in as
``STUDENT``'s ``ASSIGNMENT`` in a course with this repository's nbgrader_config.py (``ROOT``).
"""
from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ps1"
STUDENT = "mallory"


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
