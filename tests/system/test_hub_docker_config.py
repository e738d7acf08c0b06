"""The course's JupyterHub with DockerSpawner, its configuration alone (no engine, no hub): hub/jupyterhub_config.py
asks for the GPUs only where the machine has one, mounts only a learner's own things, limits each learner's
container and names its network; hub/tritonhub.py setup takes the limits and makes the learners' network without
inter-container communication. The hub itself, run with a Docker engine: tests/system/test_hub_docker.py."""
from __future__ import annotations

import importlib.util
import json
import pwd
import types
from dataclasses import asdict
from pathlib import Path

import pytest

from docker_images import ROOT
from hub_docker import HUB_LABEL, LIMITS, MEMORY_BYTES, _tritonhub


def _load_config(tmp_path: Path, monkeypatch, drop: tuple = (), **settings):
    if importlib.util.find_spec("dockerspawner") is None:
        pytest.skip("dockerspawner is not installed here (requirements/hub.txt; the slow test above installs it)")
    from traitlets.config import Config

    state = tmp_path / "state"
    (state / "etc" / "learner").mkdir(parents=True)
    (state / "api-token").write_text("not-a-token\n")
    values = dict(asdict(_tritonhub().Settings()), state=str(state), exchange=str(tmp_path / "exchange"),
                  spawner="docker", image="triton-course-hub:cpu", hub_ip="172.17.0.1", chp="chp")
    values.update(settings)
    for key in drop:  # a settings.json written before the key existed
        del values[key]
    (state / "settings.json").write_text(json.dumps(values))
    monkeypatch.setenv("TRITONHUB_SETTINGS", str(state / "settings.json"))
    c = Config()
    path = ROOT / "hub" / "jupyterhub_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: c, "__name__": "jupyterhub_config"})
    return c, state


def test_config_requests_the_gpus_only_where_the_machine_has_one(tmp_path, monkeypatch):
    """hub/jupyterhub_config.py with DockerSpawner: no device request on a machine without a GPU (settings' cpu, from
    nvidia-smi at set-up); on one with a GPU, every GPU (what `docker run --gpus all` asks the engine for)."""
    import docker as docker_py

    cpu, _ = _load_config(tmp_path / "cpu", monkeypatch, cpu=True)
    assert "device_requests" not in cpu.DockerSpawner.extra_host_config
    gpu, _ = _load_config(tmp_path / "gpu", monkeypatch, cpu=False)
    host = docker_py.types.HostConfig(version="1.43", **gpu.DockerSpawner.extra_host_config)
    assert host["DeviceRequests"] == [{"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]],
                                       "Options": {}}], host["DeviceRequests"]
    # the containers reach the hub's API on the network's gateway (settings' hub_ip here: no engine is asked)
    assert gpu.JupyterHub.hub_bind_url == gpu.JupyterHub.hub_connect_url
    assert gpu.JupyterHub.hub_connect_url.startswith("http://172.17.0.1:")
    assert gpu.JupyterHub.spawner_class.__name__ == "CourseSpawner"


def test_config_mounts_only_the_learners_own_things(tmp_path, monkeypatch):
    """The pre-spawn hook of a learner (here the account `nobody`): the learner's uid and gid, their home, the exchange,
    the learners' configuration and a passwd naming only them; the instructor gets no container settings."""
    c, state = _load_config(tmp_path, monkeypatch, instructor="root")
    pw = pwd.getpwnam("nobody")
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name="nobody"), environment={})
    c.Spawner.pre_spawn_hook(spawner)
    assert spawner.extra_create_kwargs == {"user": f"{pw.pw_uid}:{pw.pw_gid}", "working_dir": pw.pw_dir,
                                           "labels": {HUB_LABEL: str(state)}}
    assert spawner.volumes == {pw.pw_dir: {"bind": pw.pw_dir, "mode": "rw"},
                               str(tmp_path / "exchange"): {"bind": str(tmp_path / "exchange"), "mode": "rw"}}
    ids = state / "containers" / "nobody"
    assert spawner.read_only_volumes == {str(state / "etc" / "learner"): str(state / "etc" / "learner"),
                                         str(ids / "passwd"): "/etc/passwd", str(ids / "group"): "/etc/group"}
    assert [line.split(":")[0] for line in (ids / "passwd").read_text().splitlines()] == ["root", "nobody"]
    assert spawner.environment["HOME"] == pw.pw_dir and spawner.environment["USER"] == "nobody"
    assert spawner.environment["JUPYTER_CONFIG_PATH"] == str(state / "etc" / "learner")
    instructor = types.SimpleNamespace(user=types.SimpleNamespace(name="root"), environment={})
    c.Spawner.pre_spawn_hook(instructor)
    assert not hasattr(instructor, "volumes") and instructor.environment["JUPYTER_CONFIG_PATH"].endswith("instructor")


def test_config_limits_each_learner_container_and_names_its_network(tmp_path, monkeypatch):
    """The course's defaults (6G of memory with no swap beyond it, 2 CPUs' worth of time, 1024 processes and threads),
    setup's values in their place, 0 for none, and the defaults for a settings.json written before the limits existed;
    the learners' network by its name, each server reached on its port published on 127.0.0.1."""
    import docker as docker_py

    def engine_fields(c) -> dict:  # what docker-py sends the engine for DockerSpawner's limits
        d = c.DockerSpawner
        host = docker_py.types.HostConfig(version="1.41", **({"mem_limit": d.mem_limit} if "mem_limit" in d else {}),
                                          **d.extra_host_config)
        return {k: host.get(k) for k in ("Memory", "MemorySwap", "PidsLimit")} | {"cpus": d.get("cpu_limit")}

    default, _ = _load_config(tmp_path / "default", monkeypatch)
    assert engine_fields(default) == {"Memory": 6 << 30, "MemorySwap": 6 << 30, "PidsLimit": 1024, "cpus": 2.0}
    old, _ = _load_config(tmp_path / "old", monkeypatch, drop=("mem_limit", "cpu_limit", "pids_limit"))
    assert engine_fields(old) == engine_fields(default)
    given, _ = _load_config(tmp_path / "given", monkeypatch, **LIMITS)
    assert engine_fields(given) == {"Memory": MEMORY_BYTES, "MemorySwap": MEMORY_BYTES,
                                    "PidsLimit": LIMITS["pids_limit"], "cpus": LIMITS["cpu_limit"]}
    none, _ = _load_config(tmp_path / "none", monkeypatch, mem_limit="0", cpu_limit=0, pids_limit=0)
    assert engine_fields(none) == {"Memory": None, "MemorySwap": None, "PidsLimit": None, "cpus": None}
    # math threads as many as the CPU quota allows (torch/OpenBLAS would start one per host core)
    assert default.DockerSpawner.environment == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert given.DockerSpawner.environment["OMP_NUM_THREADS"] == str(max(1, int(LIMITS["cpu_limit"])))
    assert "OMP_NUM_THREADS" not in none.DockerSpawner.get("environment", {})
    assert default.DockerSpawner.extra_host_config["init"] is True  # the rest stays
    assert default.DockerSpawner.network_name == "tritonhub-learners"
    assert default.DockerSpawner.use_internal_ip is False


def test_setup_takes_the_limits_and_makes_the_learners_network_without_icc(tmp_path, monkeypatch):
    """tritonhub.py setup's options for the limits (into the settings it saves), its checks of them, and the learners'
    network: made with inter-container communication off and this hub's label; an existing one used only when its
    ICC is off (a stand-in Docker client records what setup asks)."""
    th = _tritonhub()
    taken = []
    monkeypatch.setattr(th, "setup", taken.append)
    th.main(["setup", "--state", str(tmp_path), "--spawner", "docker"])
    th.main(["setup", "--state", str(tmp_path), "--spawner", "docker", "--mem-limit", "8G", "--cpu-limit", "4",
             "--pids-limit", "2048", "--docker-network", "course-net"])
    assert [(s.mem_limit, s.cpu_limit, s.pids_limit, s.docker_network) for s in taken] == [
        ("6G", 2.0, 1024, "tritonhub-learners"), ("8G", 4.0, 2048, "course-net")]
    th.check_limits(th.Settings(mem_limit="0", cpu_limit=0, pids_limit=0))  # none
    th.check_limits(th.Settings(mem_limit="1.5G", cpu_limit=0.5, pids_limit=64))
    for bad in ({"mem_limit": "6 GB"}, {"mem_limit": "6g"}, {"mem_limit": "100M"}, {"cpu_limit": -1.0},
                {"pids_limit": 10}, {"pids_limit": -1}):
        with pytest.raises(SystemExit):
            th.check_limits(th.Settings(**bad))

    log, network = tmp_path / "docker.log", tmp_path / "network.json"
    client = tmp_path / "docker"
    client.write_text(f"""#!/bin/sh
echo "$@" >> {log}
if [ "$1 $2" = "network inspect" ]; then [ -f {network} ] && cat {network} && exit 0; exit 1; fi
""")
    client.chmod(0o755)
    settings = th.Settings(docker=str(client), docker_network="course-net", state="/srv/x")
    th.ensure_network(settings)
    assert log.read_text().splitlines()[-1] == ("network create --driver bridge --opt "
                                                "com.docker.network.bridge.enable_icc=false --label "
                                                "org.tritoncourse.hub.state=/srv/x course-net")
    network.write_text(json.dumps([{"Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "true"}}]))
    with pytest.raises(SystemExit, match="lets containers reach each other"):
        th.ensure_network(settings)
    network.write_text(json.dumps([{"Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "false"}}]))
    th.ensure_network(settings)  # an existing one without ICC: used as it is
    assert [line.split()[:2] for line in log.read_text().splitlines()] == [
        ["network", "inspect"], ["network", "create"], ["network", "inspect"], ["network", "inspect"]]
