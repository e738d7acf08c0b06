"""hub/tritonhub.py's Docker part (``setup --spawner docker``, ``teardown``): a Docker client that builds with
BuildKit, the learner image and the hub's single-user image on it (hub/singleuser.Dockerfile), the checks of each
learner container's limits, the learners' network (a bridge with inter-container communication off) and
``teardown``, which removes this hub's containers and that network.

Standard library only, as hub/tritonhub.py (run as root with any Python 3.10+).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tritonhub_common import HUB, REPO, Settings, run

def docker_client(given: str = "") -> str:
    """A Docker client that builds with BuildKit (the images use ``RUN --mount``): Debian's 20.10 has it built in,
    newer clients need the buildx plugin."""
    for client in ([given] if given else ["/usr/bin/docker", shutil.which("docker") or ""]):
        if not client or not os.access(client, os.X_OK):
            continue
        out = subprocess.run([client, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                             text=True).stdout.strip()
        major = int(out.split(".")[0]) if out[:1].isdigit() else 0
        if 0 < major < 23 or subprocess.run([client, "buildx", "version"], capture_output=True).returncode == 0:
            return client
    sys.exit("--spawner docker needs a Docker client that builds with BuildKit (Debian's docker.io, or Docker's "
             "own with the buildx plugin) and a running engine: `bash tools/docker-engine.sh` installs and starts "
             "Debian's")



def hub_image_name(learner_image: str) -> str:
    """triton-course:cpu -> triton-course-hub:cpu"""
    name, tag = learner_image, "latest"
    if ":" in learner_image.rsplit("/", 1)[-1]:
        name, tag = learner_image.rsplit(":", 1)
    return f"{name}-hub:{tag}"



def build_images(settings: Settings) -> None:
    """The learner image (unless given) and the hub's single-user image on it. Each build is cached by Docker: a
    second setup rebuilds nothing that did not change."""
    docker = settings.docker = docker_client(settings.docker)
    if subprocess.run([docker, "info"], capture_output=True, timeout=60).returncode != 0:
        sys.exit(f"`{docker} info` fails: no Docker engine answers (`bash tools/docker-engine.sh` starts Debian's)")
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    flavor = "cpu" if settings.cpu else "gpu"
    if not settings.learner_image:
        settings.learner_image = f"triton-course:{flavor}"
        print(f"tritonhub: building the learner image {settings.learner_image} (docker/Dockerfile, FLAVOR={flavor})")
        run([docker, "build", "-f", str(REPO / "docker" / "Dockerfile"), "--target", "learner",
             "--build-arg", f"FLAVOR={flavor}", "-t", settings.learner_image, str(REPO)], env=env)
    elif subprocess.run([docker, "image", "inspect", settings.learner_image], capture_output=True).returncode != 0:
        sys.exit(f"the learner image {settings.learner_image} is not on this Docker engine")
    settings.image = hub_image_name(settings.learner_image)
    print(f"tritonhub: building the hub's single-user image {settings.image} on {settings.learner_image}")
    with tempfile.TemporaryDirectory(prefix="tritonhub-image-") as tmp:
        # a context of its own: the four things hub/singleuser.Dockerfile copies, and nothing else of the repository
        context = Path(tmp)
        tracked = run(["git", "-C", str(REPO), "ls-files", "-z", "--", "tritoncourse"], capture_output=True).stdout
        for rel in [*filter(None, tracked.decode().split("\0")), "requirements/lock.txt", "requirements/hub.txt",
                    "pyproject.toml"]:
            if (REPO / rel).is_file():
                (context / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, context / rel)
        shutil.copy2(HUB / "singleuser.Dockerfile", context / "Dockerfile")
        run([docker, "build", "--build-arg", f"LEARNER_IMAGE={settings.learner_image}", "-t", settings.image,
             str(context)], env=env)



# What setup's Docker network and the hub's containers carry: the state folder of the hub that made them.
HUB_LABEL = "org.tritoncourse.hub.state"
NO_ICC = "com.docker.network.bridge.enable_icc"
MEMORY = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGT]?$")


def check_limits(settings: Settings) -> None:
    """The learners' containers' limits, as ``setup`` takes them (0: none)."""
    if not MEMORY.match(str(settings.mem_limit)):
        sys.exit(f"--mem-limit is bytes with an optional K, M, G or T (6G, 1536M; 0: none), not {settings.mem_limit!r}")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    mem = str(settings.mem_limit)
    size = float(mem[:-1]) * units[mem[-1]] if mem[-1] in units else float(mem)
    if 0 < size < 256 << 20:
        sys.exit(f"--mem-limit {mem} is below 256M: too little for JupyterLab and a kernel")
    if not 0 <= settings.cpu_limit <= 1024:
        sys.exit(f"--cpu-limit is CPUs (2, 0.5; 0: none), not {settings.cpu_limit}")
    if settings.pids_limit and not 64 <= settings.pids_limit:
        sys.exit(f"--pids-limit {settings.pids_limit} is below 64: too few for JupyterLab and a kernel (0: none)")



def ensure_network(settings: Settings) -> None:
    """The learners' Docker network: a bridge with inter-container communication off (each learner's container
    reaches the host, whose gateway address serves the hub's API, but no other container on it). Made once,
    labelled with this hub's state folder; an existing network of that name is used only if its ICC is off."""
    docker, name = settings.docker, settings.docker_network
    found = subprocess.run([docker, "network", "inspect", name], capture_output=True, text=True)
    if found.returncode == 0:
        net = json.loads(found.stdout)[0]
        if net.get("Driver") != "bridge" or (net.get("Options") or {}).get(NO_ICC) != "false":
            sys.exit(f"the Docker network {name!r} exists and lets containers reach each other (driver "
                     f"{net.get('Driver')!r}, {NO_ICC}={(net.get('Options') or {}).get(NO_ICC)!r}): learners' "
                     "containers could reach each other's servers on it. Name another with --docker-network "
                     "(setup makes it), or remove that one (docker network rm) if nothing else uses it")
        return
    print(f"tritonhub: the learners' Docker network {name} (a bridge, inter-container communication off)")
    run([docker, "network", "create", "--driver", "bridge", "--opt", f"{NO_ICC}=false",
         "--label", f"{HUB_LABEL}={settings.state}", name], stdout=subprocess.DEVNULL)



def teardown(settings: Settings) -> None:
    """After the hub has stopped: the learners' containers of this hub still on the engine (the hub deletes each
    one when its server stops; a hub killed outright leaves them) and the learners' network, if setup made it.
    Images, accounts, homes, the course and the state folder stay."""
    if os.geteuid() != 0:
        sys.exit("tritonhub teardown runs as root")
    if settings.spawner != "docker":
        print("tritonhub: nothing to tear down (the hub does not use Docker)")
        return
    docker = docker_client(settings.docker)
    ids = run([docker, "ps", "-aq", "--filter", f"label={HUB_LABEL}={settings.state}"], capture_output=True,
              text=True).stdout.split()
    if ids:
        run([docker, "rm", "-f", *ids], stdout=subprocess.DEVNULL)
        print(f"tritonhub: removed {len(ids)} learner container(s) of this hub")
    found = subprocess.run([docker, "network", "inspect", settings.docker_network], capture_output=True, text=True)
    if found.returncode != 0:
        return
    if (json.loads(found.stdout)[0].get("Labels") or {}).get(HUB_LABEL) != settings.state:
        print(f"tritonhub: the Docker network {settings.docker_network} was not made by this hub's setup: left")
        return
    run([docker, "network", "rm", settings.docker_network], stdout=subprocess.DEVNULL)
    print(f"tritonhub: removed the Docker network {settings.docker_network}")

