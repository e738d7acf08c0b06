"""Learner markup is inert in the instructor's pages: Formgrader's submission page and the feedback HTML.

A learner controls every output of their notebook (their code makes any display message, with any mimetype
and metadata) and every markdown cell. Both pages used to show that markup live, in the instructor's browser:
Formgrader's pages are served by the instructor's own Jupyter server, whose API a script there can call as the
instructor. This test builds one hostile submission (tests/support/hostile_markup.py's ``hostile_notebook``: a
``<script>`` and event handlers in outputs and in a markdown answer, ``application/javascript``, iframes,
``javascript:`` links, an SVG with ``onload``, raw HTML in a ``text/markdown`` output, image metadata that
breaks out of its attribute, external images and style sheets...) whose every payload, if it ran or loaded,
would leave a mark: ``window.__pwned``, ``document.title = 'PWNED'``, or a request to a small HTTP server of the
test's own on 127.0.0.1 that records what reaches it.

It then loads, in Debian's headless Chromium driven by Playwright (as tests/system/test_browser.py does):

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

The page's probe and the test's server are tests/support/inert_probe.py's; the course's sanitizer and HTML exporter
are checked without a browser in tests/grader/test_inert_markup.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hostile_markup import ASSIGNMENT, ROOT, STUDENT, hostile_notebook
from inert_probe import LeakServer, _formgrader_paths, assert_inert, probe
from learner_lab import _requirements_or_fail
from servers import free_port, wait_until_answers


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
