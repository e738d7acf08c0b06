"""The course's JupyterHub with DockerSpawner (issue 30): each learner's JupyterLab is a container of the course's
learner image, as a learner and the instructor use it.

The hub is set up by hub/tritonhub.py (``setup --spawner docker --learner-image triton-course:cpu``: the learner image
tests/support/docker_images.py builds once per session for tests/system/test_container.py too, and on it
hub/singleuser.Dockerfile's thin layer) with throw-away Unix accounts (th<random>-*, deleted afterwards, only those;
tests/support/hub_env.py), then:

- learner A logs in through the hub's log-in form (PAM, over HTTP: no browser), and the hub starts A's server as a
  container of that image, run as A's uid and gid; the Assignment List is on in A's JupyterLab, Formgrader off;
- in the container, A fetches 01_vector_add through the Assignment List's own REST handlers (what its Fetch button
  calls), writes a cell naming A into the notebook through the contents API, and submits it (the Submit button's
  handler, which runs hub/checked_submit.py);
- A's kernel, in the container, reads its own home but not the course's source/, gradebook or directory, not learner
  B's home or file, and cannot list the exchange's inbound/; its passwd names A alone; the container mounts A's home,
  the exchange, the learners' configuration and its passwd and group files, nothing else;
- learner B submits on the host meanwhile (nbgrader as B), and the instructor's server starts as a local process
  (Formgrader's grading needs the course directory and bubblewrap), not a container;
- the instructor's `nbgrader collect` takes both submissions, each its owner's notebook; stopping A's server
  deletes its container.

Limits and the network (set up with limits of the test's own, not the course's defaults, so that they are seen to be
the configured ones, and on a learners' network of its own, removed by ``tritonhub.py teardown`` afterwards):

- A's and B's containers (B's server is started as a container too, through the hub's API) have the configured
  memory (swap included), CPU quota and pids limit (docker inspect), on the learners' network, whose inter-container
  communication is off;
- in A's container, a bounded fork loop (at most twice the limit, 30 s) stops with EAGAIN at the pids limit (the
  container's pids cgroup full), and afterwards A's kernel, A's server and the hub answer;
- A's kernel cannot open a TCP connection to B's server (B's address on the network, and B's port published on the
  host, through the gateway) nor the hub's proxy (127.0.0.1 only), nor B (a process of B's uid in B's container) to
  A's, while both reach the hub's API on the gateway and the host reaches B's server.

Without a GPU (CI) the container gets none, and a configuration test (tests/system/test_hub_docker_config.py, with the
hub's configuration, limits and network alone) checks that the GPU request is there only where the machine has one: the
GPU path itself was not run here. Root only (Unix accounts); needs a Docker engine (as test_container.py: skipped
without one, failed in CI as root) and configurable-http-proxy. Seconds of each step:
tests/artifacts/hub-docker/times.json.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest

import hub_env
from docker_images import run
from hub_docker import (ARTIFACTS, COURSE_ID, HUB_LABEL, LIMITS, PORTABLE, DockerHub, _check_limits,
                        _skip_unless_possible, _wait_ready)
from hub_docker_probes import Learner, _fork_probe_code, _net_probe_code, _probe_code
from hub_env import PHASE
from hub_learners import marked_notebook, owner_of


@pytest.fixture(scope="session")
def hub_possible() -> tuple[str, str]:
    """configurable-http-proxy's path and the Docker client, or the reason to skip; before ``cpu_image`` (same scope,
    named first): no image is built for a test that skips."""
    return _skip_unless_possible()


@pytest.fixture
def docker_hub(hub_possible, cpu_image, monkeypatch):
    """A hub with DockerSpawner on the session's CPU learner image: the instructor, learners a and b, 01_vector_add
    released, started; stopped, its containers and accounts deleted afterwards (its log kept in ARTIFACTS)."""
    chp, client = hub_possible
    monkeypatch.setattr(hub_env, "PORTABLE", PORTABLE)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="tritonhub-docker-test-"))
    scratch.chmod(0o711)
    h, times, began = None, {}, time.monotonic()
    try:
        h = DockerHub(scratch, chp, client, cpu_image, times)
        h.setup()
        start = time.monotonic()
        h.as_user(h.instructor, "nbgrader", "release_assignment", PHASE, "--log-level=WARN", cwd=h.course)
        times["release_assignment"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        h.start()
        times["hub start"] = round(time.monotonic() - start, 1)
        yield h
    finally:
        if h is not None:
            if h.proc:
                (ARTIFACTS / "jupyterhub.log").write_text(h.log_text())
            for user in h.learners.values():  # a container still there (a failure): its server's log
                logs = run(h.client, "logs", "--tail", "300", h.container(user), check=False)
                if logs.returncode == 0:
                    (ARTIFACTS / f"container-{user}.log").write_text(logs.stdout + logs.stderr)
            start = time.monotonic()
            try:
                h.stop()
                h.remove_containers()
                times["teardown"] = round(time.monotonic() - start, 1)
                start = time.monotonic()
                h.teardown()
                times["tritonhub.py teardown (the learners' network)"] = round(time.monotonic() - start, 1)
            finally:
                times["all of it, beyond the learner image"] = round(time.monotonic() - began, 1)
                (ARTIFACTS / "times.json").write_text(json.dumps(times, indent=1) + "\n")
                shutil.rmtree(scratch, ignore_errors=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.container
def test_learner_fetches_and_submits_in_a_container_of_the_learner_image(docker_hub):
    h = docker_hub
    times = h.times
    a, b, instructor = h.learners["a"], h.learners["b"], h.instructor
    a_home, b_home = h.home(a), h.home(b)
    a_pw = pwd.getpwnam(a)

    # Meanwhile: the instructor's server (a local process), learner B's server (a container, started through the hub's
    # API: A must not reach it) and B's submission (nbgrader on the host, as B).
    h.api("POST", f"/users/{instructor}/server")
    b_started = time.monotonic()
    h.api("POST", f"/users/{b}")  # the hub knows a learner once logged in, or added so
    h.api("POST", f"/users/{b}/server")
    b_errors: list[BaseException] = []

    def learner_b() -> None:
        try:
            h.as_user(b, "nbgrader", "fetch_assignment", PHASE, "--log-level=WARN")
            nbformat.write(marked_notebook(b), b_home / PHASE / f"{PHASE}.ipynb")
            (b_home / "notes.txt").write_text("B's own notes\n")
            for path in (b_home / PHASE / f"{PHASE}.ipynb", b_home / "notes.txt"):
                os.chown(path, pwd.getpwnam(b).pw_uid, pwd.getpwnam(b).pw_gid)
            h.as_user(b, "nbgrader", "submit", PHASE, "--log-level=WARN")
        except BaseException as e:  # noqa: BLE001 (reported below)
            b_errors.append(e)

    b_thread = threading.Thread(target=learner_b, daemon=True)
    b_thread.start()

    # A logs in; the hub starts A's server, a container of the learner image.
    start = time.monotonic()
    learner = Learner(h.base, a)
    learner.log_in(h.passwords[a])
    learner.request("GET", "/hub/spawn")
    _wait_ready(h, a)
    times["A's log-in to a running container"] = round(time.monotonic() - start, 1)

    name = h.container(a)
    info = json.loads(run(h.client, "inspect", name).stdout)[0]
    image = h.settings["image"]
    assert info["Config"]["Image"] == image, info["Config"]["Image"]
    layers = {i: json.loads(run(h.client, "image", "inspect", i).stdout)[0]["RootFS"]["Layers"]
              for i in (image, h.learner_image)}
    assert layers[image][:len(layers[h.learner_image])] == layers[h.learner_image], \
        f"{image} is not built on {h.learner_image}"
    assert info["Config"]["User"] == f"{a_pw.pw_uid}:{a_pw.pw_gid}", info["Config"]["User"]
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in info["Mounts"]}
    role_dir = str(h.state / "etc" / "learner")
    assert mounts == {
        str(a_home): (str(a_home), True), h.settings["exchange"]: (h.settings["exchange"], True),
        role_dir: (role_dir, False), "/etc/passwd": (str(h.state / "containers" / a / "passwd"), False),
        "/etc/group": (str(h.state / "containers" / a / "group"), False)}, mounts
    assert not info["HostConfig"].get("DeviceRequests"), "a GPU was requested on a machine without one"
    assert info["HostConfig"]["CapDrop"] == ["ALL"] and "no-new-privileges" in info["HostConfig"]["SecurityOpt"]
    # the configured limits, on the learners' network, whose inter-container communication is off (setup made it)
    _check_limits(info, h.network)
    network = h.network_info()
    assert network and network["Driver"] == "bridge" and network["Options"].get(
        "com.docker.network.bridge.enable_icc") == "false", network
    assert network["Labels"].get(HUB_LABEL) == str(h.state), network["Labels"]
    assert info["Config"]["Labels"].get(HUB_LABEL) == str(h.state), info["Config"]["Labels"]
    gateway = [g["Gateway"] for g in network["IPAM"]["Config"] if g.get("Gateway")][0]

    # A's JupyterLab (the hub's OAuth on the way): the Assignment List on, Formgrader off.
    start = time.monotonic()
    _, landed, page = learner.request("GET", f"/user/{a}/lab")
    assert landed.startswith(f"/user/{a}/lab"), landed
    config = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    disabled = set(config.get("disabledExtensions", []))
    assert "@jupyter/nbgrader:assignment-list" not in disabled and "@jupyter/nbgrader:menu" not in disabled, disabled
    assert "@jupyter/nbgrader:formgrader" in disabled, disabled

    # The Assignment List's Fetch, a cell naming A written into the notebook, and its Submit.
    listed = learner.json("GET", f"/user/{a}/assignments?course_id={COURSE_ID}")
    assert [x["status"] for x in listed["value"] if x["assignment_id"] == PHASE] == ["released"], listed
    fetched = learner.json("POST", f"/user/{a}/assignments/fetch",
                           form={"course_id": COURSE_ID, "assignment_id": PHASE})
    assert any(x["assignment_id"] == PHASE and x["status"] == "fetched" for x in fetched["value"]), fetched
    nb_path = f"/user/{a}/api/contents/{PHASE}/{PHASE}.ipynb"
    model = learner.json("GET", nb_path + "?content=1")
    model["content"]["cells"].append({"cell_type": "code", "id": "owner-marker", "metadata": {},
                                      "source": f"# OWNER={a}", "outputs": [], "execution_count": None})
    learner.json("PUT", nb_path, body={"type": "notebook", "format": "json", "content": model["content"]})
    assert owner_of(a_home / PHASE / f"{PHASE}.ipynb") == a
    assert (a_home / PHASE / f"{PHASE}.ipynb").stat().st_uid == a_pw.pw_uid, "the notebook is not A's file"
    submitted = learner.json("POST", f"/user/{a}/assignments/submit",
                             form={"course_id": COURSE_ID, "assignment_id": PHASE})
    assert submitted.get("success") is True, submitted
    times["A's fetch, edit and submit"] = round(time.monotonic() - start, 1)

    b_thread.join(timeout=300)
    assert not b_thread.is_alive() and not b_errors, f"learner B's submission failed: {b_errors}"

    # A's kernel, in the container: A's own files only.
    start = time.monotonic()
    kernel = learner.json("POST", f"/user/{a}/api/kernels", body={"name": "python3"})

    def in_kernel(code: str) -> dict:
        return json.loads(learner.execute(kernel["id"], code).strip().splitlines()[-1])

    try:
        seen = in_kernel(_probe_code(h, a_home, b_home))
        times["A's kernel probe"] = round(time.monotonic() - start, 1)

        # B's server, a container on the same network: A cannot connect to it, B cannot connect to A's; both reach
        # the hub's API on the gateway; the host (the proxy's side) reaches B's server.
        waited = time.monotonic()
        _wait_ready(h, b)
        times["B's server started (a container), from the API's request"] = round(time.monotonic() - b_started, 1)
        times["waited for B's server after A's probe"] = round(time.monotonic() - waited, 1)
        start = time.monotonic()
        b_info = json.loads(run(h.client, "inspect", h.container(b)).stdout)[0]
        _check_limits(b_info, h.network)
        a_info = json.loads(run(h.client, "inspect", name).stdout)[0]
        port = int(next(iter(b_info["Config"]["ExposedPorts"])).split("/")[0])  # the server's port in a container
        ip = {who: i["NetworkSettings"]["Networks"][h.network]["IPAddress"] for who, i in (("a", a_info), ("b", b_info))}
        b_published = int(b_info["NetworkSettings"]["Ports"][f"{port}/tcp"][0]["HostPort"])
        hub_api = f"http://{gateway}:{h.settings['hub_port']}/hub/api/"
        socket.create_connection((ip["b"], port), timeout=10).close()  # B's server listens there (from the host)
        b_pw = pwd.getpwnam(b)
        b_seen: dict = {}

        def from_b() -> None:  # a process of B's uid in B's container
            try:
                out = run(h.client, "exec", "--user", f"{b_pw.pw_uid}:{b_pw.pw_gid}", h.container(b), "python3", "-c",
                          _net_probe_code({"hub": hub_api, "a_server": [ip["a"], port]}), timeout=120)
                b_seen.update(json.loads(out.stdout.strip().splitlines()[-1]))
            except Exception as e:  # noqa: BLE001 (asserted below)
                b_seen["error"] = repr(e)[-3000:]

        b_probe = threading.Thread(target=from_b, daemon=True)
        b_probe.start()
        a_net = in_kernel(_net_probe_code({"hub": hub_api, "b_server": [ip["b"], port],
                                           "b_published_port": [gateway, b_published],
                                           "hub_proxy": [gateway, h.port]}))
        b_probe.join(timeout=150)
        times["network probes (A's kernel, B's docker exec)"] = round(time.monotonic() - start, 1)
        (ARTIFACTS / "network.json").write_text(json.dumps({"a": a_net, "b": b_seen, "ip": ip, "port": port,
                                                            "gateway": gateway, "b_published": b_published}, indent=1))
        version = h.api("GET", "/")[1]["version"]
        assert a_net["hub"] == version and b_seen.get("hub") == version, (a_net, b_seen)
        assert a_net["b_server"] != "connected" and a_net["b_published_port"] != "connected", a_net
        assert a_net["hub_proxy"] != "connected", a_net  # the proxy listens on 127.0.0.1 only
        assert b_seen.get("a_server") not in (None, "connected"), b_seen

        # A fork loop in A's container stops at the pids limit (EAGAIN: the container's pids cgroup is full) long
        # before its own cap; afterwards the container's task count is back down and A's kernel, A's server and the
        # hub answer (the host was never involved: the loop ran in the container, bounded).
        start = time.monotonic()
        limit = LIMITS["pids_limit"]
        forked = in_kernel(_fork_probe_code(2 * limit, 30))
        after = in_kernel("import json\nprint(json.dumps({'pids_current': next((open(p).read().strip() for p in "
                          "('/sys/fs/cgroup/pids/pids.current', '/sys/fs/cgroup/pids.current') "
                          "if __import__('os').path.exists(p)), None)}))")
        times["fork loop to the pids limit, in A's container"] = round(time.monotonic() - start, 1)
        (ARTIFACTS / "fork.json").write_text(json.dumps({"loop": forked, "after": after}, indent=1))
        assert forked.get("stopped") == "EAGAIN" and forked["forked"] < limit, forked
        assert forked["pids_max"] in (None, str(limit)), forked
        if forked["pids_current_then"] is not None:  # the cgroup was full when the fork failed
            assert int(forked["pids_current_then"]) >= limit - 8, forked
        if after["pids_current"] is not None:
            assert int(after["pids_current"]) < limit // 2, after
        assert learner.json("GET", f"/user/{a}/api/status") and h.api("GET", "/")[0] == 200
    finally:
        learner.request("DELETE", f"/user/{a}/api/kernels/{kernel['id']}")
    (ARTIFACTS / "probe.json").write_text(json.dumps(seen, indent=1) + "\n")
    assert (seen["uid"], seen["gid"], seen["user"]) == (a_pw.pw_uid, a_pw.pw_gid, a), seen
    assert seen["prefix"] == "/opt/venv" and seen["interpret"] == "1", seen  # the learner image's CPU environment
    assert seen["tritoncourse"].startswith("/opt/venv/"), seen
    assert seen["own_home"] == "read", seen
    for what in ("course_source", "gradebook", "course_dir", "instructor_home", "other_home", "other_file"):
        assert seen[what] == "FileNotFoundError", f"{what}: {seen[what]} (not mounted: it must not exist there)"
    assert seen["inbound"] == "PermissionError", seen  # nbgrader's inbound/ (2733): written, never listed
    assert [line.split(":")[0] for line in seen["passwd"].splitlines()] == ["root", a], seen["passwd"]
    # a pid namespace of its own: Docker's init, then A's processes only (no other user's, no host's)
    assert seen["pid1"].endswith("docker-init") and seen["process_uids"] == [a_pw.pw_uid], seen

    # The instructor's server: a local process as the instructor, no container.
    deadline = time.monotonic() + 240
    while not h.api("GET", f"/users/{instructor}")[1]["servers"].get("", {}).get("ready"):
        assert time.monotonic() < deadline, f"the instructor's server did not start:\n{h.log_text()}"
        time.sleep(1)
    assert h.pids_of(instructor), "the instructor's server runs no process as the instructor"
    assert run(h.client, "inspect", h.container(instructor), check=False).returncode != 0, \
        "the instructor's server is a container"

    # The instructor collects: each submission is its owner's notebook.
    start = time.monotonic()
    h.as_user(instructor, "nbgrader", "collect", PHASE, "--log-level=WARN", cwd=h.course)
    times["instructor's collect"] = round(time.monotonic() - start, 1)
    for learner_name in (a, b):
        collected = h.course / "submitted" / learner_name / PHASE / f"{PHASE}.ipynb"
        assert collected.exists(), f"{learner_name}'s submission was not collected"
        assert owner_of(collected) == learner_name, f"{collected} is not {learner_name}'s notebook"

    # Stopping A's (and B's) server deletes its container; A's files stay in A's home.
    start = time.monotonic()
    h.api("DELETE", f"/users/{a}/server")
    h.api("DELETE", f"/users/{b}/server")
    deadline = time.monotonic() + 120
    for container in (name, h.container(b)):
        while run(h.client, "inspect", container, check=False).returncode == 0:
            assert time.monotonic() < deadline, f"{container} outlived its server"
            time.sleep(1)
    assert owner_of(a_home / PHASE / f"{PHASE}.ipynb") == a
    times["A's server stopped, container gone"] = round(time.monotonic() - start, 1)
