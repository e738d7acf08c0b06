"""Learner markup made inert without a browser: the course's sanitizer (tritoncourse/classroom/sanitize.py) keeps
an answer's markup and escapes the rest, keeps of each output what shows without a script, and the HTML exporter
as nbgrader_config.py configures it, with Formgrader's template, renders tests/support/hostile_markup.py's submission
with a Content-Security-Policy and no element of the learner's that runs or loads anything. The same submission in the
instructor's pages, in Chromium: tests/grader/test_inert_pages.py.
"""
from __future__ import annotations

import json
from pathlib import Path

from hostile_markup import ASSIGNMENT, ROOT, STUDENT, hostile_notebook


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
