"""Learner markup made inert in the instructor's pages: Formgrader's submission pages and the feedback HTML.

A learner controls every output of their notebook (their code can send any display message, any mimetype,
any metadata) and every markdown cell they can edit. nbgrader renders both with nbconvert's HTMLExporter, in
its own ``formgrade`` and ``feedback`` templates; those templates render markdown cells themselves, without
nbconvert's ``clean_html``, so ``HTMLExporter.sanitize_html`` alone leaves a ``<script>`` in a markdown answer
live; and the classic template nbgrader extends prints image metadata into an unquoted attribute, image
``filenames`` metadata as a URL, and runs ``application/javascript`` outputs. In Formgrader all of that runs in
a page of the instructor's own Jupyter server, whose API a script there can call as the instructor.

``nbgrader_config.py`` configures the HTMLExporter that both nbgrader's Formgrader and ``nbgrader
generate_feedback`` build (the same class, ``c.HTMLExporter``), with three layers:

1. :class:`InertLearnerContent`, a preprocessor run before the page is rendered: outputs keep only the
   mimetypes the page shows without script (plain text, sanitized HTML, markdown, LaTeX, PNG/JPEG, SVG as an
   ``<img>``); ``application/javascript``, widget views and anything unknown are dropped (a text note says
   so); image metadata keeps only numeric sizes; ``filenames`` and ``isolated`` go; markdown attachments keep
   images only; raw cells are sanitized; widget state in the notebook's metadata goes; a ``grade_id`` that is
   not a plain name (the templates print it unescaped) is made one.
2. Render-time filters: ``markdown2html`` (markdown cells, ``text/markdown`` outputs, instructor comments) and
   ``clean_html`` (``text/html`` outputs, with ``HTMLExporter.sanitize_html = True``) both end in
   :func:`sanitize_html`, an allow-list (bleach, as nbconvert's own sanitizer) of the tags Markdown makes:
   no script, style, iframe, object, embed, form, SVG or MathML elements, no event handler or ``id`` attribute,
   links only to http(s), mailto and ``#fragments``, images only from ``data:image/...`` (so no request leaves
   the page), inline styles only for a few properties and never with ``url()``. Forbidden markup is escaped,
   not dropped: the instructor sees what the learner wrote, as text.
3. A Content-Security-Policy ``<meta>`` in both pages (templates/*/mathjax.html.j2 replace nbconvert's MathJax
   macro, which both nbgrader templates call in ``<head>``): no inline script but the page's own (by hash), no
   script from anywhere but MathJax's pinned CDN folder, images only ``data:``, no frames, objects, forms,
   fetches (Formgrader: its own API only) or ``<base>``. A defence in depth: with layers 1 and 2 no learner
   markup reaches it.

MathJax still typesets the learner's math (``$...$``); it is loaded from the same CDN folder nbgrader uses,
pinned to 2.7.7, configured without ``eval`` (a hashed inline object, not ``text/x-mathjax-config``), with its
Safe extension, with web fonts from that folder.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

import bleach
from bleach.css_sanitizer import CSSSanitizer
from markupsafe import Markup
from traitlets import Bool
from traitlets.config import LoggingConfigurable

from nbconvert.preprocessors import Preprocessor

TEMPLATE_BASEDIR = str(Path(__file__).resolve().parent / "templates")

# ------------------------------------------------------------------ the HTML allow-list

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd", "del", "details",
    "dfn", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img",
    "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strike", "strong", "sub",
    "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "tt", "u", "ul", "var",
})
_COMMON = {"class", "title", "lang", "dir", "style", "align"}
ATTRIBUTES = {
    "a": {"href"}, "img": {"src", "alt", "width", "height"}, "ol": {"start", "type"},
    "td": {"colspan", "rowspan", "valign", "halign"}, "th": {"colspan", "rowspan", "valign", "halign", "scope"},
    "tr": {"valign", "halign"}, "col": {"span"}, "colgroup": {"span"}, "table": {"border"}, "details": {"open"},
}
CSS_PROPERTIES = ["color", "background-color", "text-align", "font-weight", "font-style", "text-decoration",
                  "vertical-align", "white-space", "border-collapse", "width", "height", "max-width", "min-width",
                  "padding", "padding-left", "padding-right", "margin-left", "margin-right", "text-indent"]
# class names that rendered Markdown and outputs use: pygments' short token classes, nbconvert's own
# (anchor-link, ansi-*), pandas' dataframe; never Formgrader's or Bootstrap's interactive ones (score, comment,
# navbar-fixed-top, modal...), which a learner could use to cover or confuse the grading form.
_CLASS = re.compile(r"^(?:[a-z]{1,3}[0-9]?|highlight|hll|anchor-link|dataframe|ansi-[a-z-]+|math|"
                    r"text-(?:left|right|center|muted)|lead)$")
_IMAGE_DATA = re.compile(r"^data:image/(?:png|jpeg|gif|webp|svg\+xml)[;,]", re.I)
_HREF = re.compile(r"^(?:https?://|mailto:|#)", re.I)
_NUMBER = re.compile(r"^\s*\d{1,5}(?:\.\d+)?\s*(?:px|%)?\s*$")
_CSS_DANGER = re.compile(r"url\s*\(|image(?:-set)?\s*\(|expression|\\|@|var\s*\(|attr\s*\(|/\*", re.I)
_css = CSSSanitizer(allowed_css_properties=CSS_PROPERTIES)


def _allow(tag: str, name: str, value: str) -> bool:
    if name in _COMMON:
        if name == "style":
            return not _CSS_DANGER.search(value)
        return True
    if name not in ATTRIBUTES.get(tag, ()):
        return False
    if name == "href":
        return bool(_HREF.match(value.strip()))
    if name == "src":
        return bool(_IMAGE_DATA.match(value.strip()))
    if name in ("width", "height"):
        return bool(_NUMBER.match(value))
    return True


class _ClassFilter:
    """A bleach filter that keeps only allowed class names."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        for token in self.source:
            data = token.get("data")
            if token.get("type") in ("StartTag", "EmptyTag") and isinstance(data, dict):
                key = (None, "class")
                if key in data:
                    kept = " ".join(c for c in data[key].split() if _CLASS.match(c))
                    if kept:
                        data[key] = kept
                    else:
                        del data[key]
            yield token


_cleaner = bleach.Cleaner(tags=TAGS, attributes=_allow, protocols=["http", "https", "mailto", "data"],
                          strip=False, strip_comments=True, css_sanitizer=_css, filters=[_ClassFilter])


def sanitize_html(html) -> str:
    """HTML with only the allow-listed markup; anything else is escaped (shown as text)."""
    if html is None:
        return ""
    if isinstance(html, bytes):
        html = html.decode("utf-8", "replace")
    if isinstance(html, list):
        html = "".join(html)
    return _cleaner.clean(str(html))


def clean_html(element) -> Markup:
    """nbconvert's ``clean_html`` filter, with the course's allow-list (registered in nbgrader_config.py)."""
    return Markup(sanitize_html(element))  # noqa: S704 - sanitized just now


class SafeMarkdown2HTML(LoggingConfigurable):
    """nbconvert's ``markdown2html`` filter (the exporter's own, with its settings), then :func:`sanitize_html`.

    Registered in ``c.HTMLExporter.filters``; nbconvert builds it with the exporter as its parent."""

    jinja_pass_arg = getattr(__import__("jinja2").pass_context(lambda: None), "jinja_pass_arg")

    def __call__(self, context, source):
        render = getattr(self.parent, "markdown2html", None)
        if render is not None:
            html = render(context, source)
        else:  # pragma: no cover - another exporter: nbconvert's plain filter
            from nbconvert.filters import markdown2html

            html = markdown2html(source)
        return Markup(sanitize_html(html))  # noqa: S704 - sanitized just now


# ------------------------------------------------------------------ the preprocessor

SHOWN_MIMETYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
                   "image/svg+xml")
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")
_GRADE_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _image_metadata(meta) -> dict:
    out = {}
    if not isinstance(meta, dict):
        return out
    for key in ("width", "height"):
        value = meta.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and 0 < value < 100_000:
            out[key] = int(value)
        elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 5:
            out[key] = int(value.strip())
    if isinstance(meta.get("alt"), str):
        out["alt"] = meta["alt"]
    if meta.get("unconfined") is True:
        out["unconfined"] = True
    return out


def inert_output(output) -> None:
    """Make one code cell output safe to render (in place)."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return  # stream and error outputs: text, escaped by the templates
    data = output.get("data", {}) or {}
    meta = output.get("metadata", {}) or {}
    kept, dropped = {}, []
    for mime, value in data.items():
        if mime not in SHOWN_MIMETYPES:
            dropped.append(mime)
        elif mime == "text/html":
            kept[mime] = sanitize_html(_text(value))
        elif mime in ("image/png", "image/jpeg"):
            if isinstance(value, str) and _BASE64.match(value):
                kept[mime] = value
            else:
                dropped.append(mime)
        else:
            kept[mime] = _text(value) if mime.startswith("text/") or mime == "image/svg+xml" else value
    if dropped and "text/plain" not in kept:
        kept["text/plain"] = f"[not shown here: {', '.join(sorted(dropped))}]"
    output["data"] = kept
    new_meta = {}
    for mime in ("image/png", "image/jpeg"):
        if mime in kept:
            per_type = _image_metadata(meta.get(mime))
            if per_type:
                new_meta[mime] = per_type
    top = _image_metadata(meta)
    new_meta.update({k: v for k, v in top.items() if any(m in kept for m in ("image/png", "image/jpeg"))})
    output["metadata"] = new_meta  # no filenames (a URL), no isolated (an iframe)


def inert_notebook(nb):
    """Make a notebook's learner-controlled parts safe to render to HTML (in place); returns ``nb``."""
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        grader = meta.get("nbgrader")
        if isinstance(grader, dict) and "grade_id" in grader and not _GRADE_ID.match(str(grader["grade_id"])):
            grader["grade_id"] = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(grader["grade_id"]))[:100] or "_"
        if cell.get("cell_type") == "code":
            for output in cell.get("outputs", []):
                inert_output(output)
        elif cell.get("cell_type") == "markdown":
            attachments = cell.get("attachments")
            if attachments:
                for name in list(attachments):
                    bundle = attachments[name]
                    images = {m: v for m, v in (bundle or {}).items()
                              if _IMAGE_DATA.match(f"data:{m};") and isinstance(v, str) and _BASE64.match(v)}
                    if images:
                        attachments[name] = images
                    else:
                        del attachments[name]
        elif cell.get("cell_type") == "raw":
            cell.source = sanitize_html(cell.source)
    nb.metadata.pop("widgets", None)
    return nb


class InertLearnerContent(Preprocessor):
    """HTMLExporter step (Formgrader and generate_feedback): learner outputs and cells made safe to render."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        return inert_notebook(nb), resources


# ------------------------------------------------------------------ the pages' <head>: CSP and MathJax

MATHJAX_FOLDER = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/"

# nbgrader's own MathJax (nbconvert's default): the "TeX-AMS-MML_HTMLorMML-full" combined configuration (it holds
# TeX input, AMS, tex2jax and the HTML-CSS output), plus the Safe extension; web fonts STIX-Web, from the same folder.
MATHJAX_URL = MATHJAX_FOLDER + "MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
MATHJAX_CONFIG = {
    "TeX": {"equationNumbers": {"autoNumber": "AMS", "useLabelIds": True}},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None,
                 "linebreaks": {"automatic": True}},
    "tex2jax": {"inlineMath": [["$", "$"], ["\\(", "\\)"]], "displayMath": [["$$", "$$"], ["\\[", "\\]"]],
                "processEscapes": True, "processEnvironments": True},
    "displayAlign": "center", "messageStyle": "none", "showMathMenu": False,
    "Safe": {"allow": {"URLs": "none", "classes": "none", "cssIDs": "none", "styles": "none"}},
}
_CONFIG_SCRIPT = "window.MathJax = " + json.dumps(MATHJAX_CONFIG, sort_keys=True) + ";"


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _formgrade_inline_hashes() -> list[str]:
    """Hashes of the static inline scripts and handlers in nbgrader's formgrade page that come after <head>'s
    MathJax (the navigation bar's tooltip set-up and its show/hide-name buttons)."""
    import nbgrader

    macros = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates" / "formgrade" / \
        "formgrade_macros.html.j2"
    try:
        text = macros.read_text()
    except OSError:  # pragma: no cover - another nbgrader: its inline code is blocked, grading still works
        return []
    nav = text[text.find("{% macro nav"):]
    scripts = [s for s in re.findall(r"<script[^>]*>(.*?)</script>", nav, re.S) if "{{" not in s and "{%" not in s]
    handlers = [h for h in re.findall(r"\son[a-z]+=\"([^\"]*)\"", nav) if "{{" not in h]
    return [_sha(s) for s in scripts] + (["'unsafe-hashes'"] + [_sha(h) for h in handlers] if handlers else [])


def content_security_policy(page: str) -> str:
    """The policy of Formgrader's submission page (``formgrade``) or of the feedback HTML (``feedback``)."""
    mathjax = MATHJAX_FOLDER
    if page == "formgrade":
        scripts = " ".join([_sha(_CONFIG_SCRIPT), *_formgrade_inline_hashes(), mathjax])
        return ("default-src 'none'; "
                f"script-src {scripts}; style-src 'self' 'unsafe-inline'; font-src 'self' data: {mathjax}; "
                "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'")
    return ("default-src 'none'; "
            f"script-src {_sha(_CONFIG_SCRIPT)} {mathjax}; style-src 'unsafe-inline'; font-src data: {mathjax}; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def inert_head(page: str) -> Markup:
    """What the pages' MathJax macro writes into <head>: the CSP, then MathJax, configured without eval."""
    policy = content_security_policy(page)
    return Markup(  # noqa: S704 - no learner data in it
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        f"<script>{_CONFIG_SCRIPT}</script>\n"
        f'<script src="{MATHJAX_URL}"></script>\n')


FILTERS = {"markdown2html": SafeMarkdown2HTML, "clean_html": clean_html, "inert_head": inert_head}


def nbgrader_template_basedir() -> str:
    """nbgrader's own template folder (formgrade/, feedback/), which the course's must sit in front of."""
    import nbgrader

    return os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")
