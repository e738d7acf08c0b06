#!/usr/bin/env bash
# A Docker engine for tests/system/test_container.py (the images built and run), on Debian or Ubuntu:
#   docker.io     Debian's engine (dockerd, containerd, runc) and its client /usr/bin/docker (BuildKit built in)
#   debootstrap   makes the tests' local base image (no base image can be pulled on CI's machines)
# then starts dockerd (systemd where it runs, else in the background, logging to /var/log/dockerd.log)
# and waits until it answers. Run as root; as another user it prints the one command to run.
# Installs and starts only what is missing: running it again costs a second.
set -euo pipefail

client() {
    # Debian's client first: newer clients build only through the buildx plugin.
    if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker || true; fi
}

engine_answers() {
    local docker
    docker=$(client)
    [ -n "$docker" ] && timeout 10 "$docker" info >/dev/null 2>&1
}

packages=()
[ -x /usr/sbin/dockerd ] || [ -x /usr/bin/dockerd ] || packages+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || packages+=(debootstrap)
if [ ${#packages[@]} -eq 0 ] && engine_answers; then
    echo "docker-engine: $("$(client)" version --format 'engine {{.Server.Version}}, client {{.Client.Version}}') already running"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "docker-engine: a Docker engine needs root to install and start; run:" >&2
    echo "    sudo bash $(cd "$(dirname "$0")" && pwd)/docker-engine.sh" >&2
    exit 1
fi
if [ ${#packages[@]} -gt 0 ]; then
    echo "docker-engine: installing ${packages[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
if ! engine_answers; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl start docker
    else
        # No systemd (a CI container or a bare VM): dockerd in the background, outliving this script.
        dockerd=$(command -v dockerd || echo /usr/sbin/dockerd)
        nohup setsid "$dockerd" >>/var/log/dockerd.log 2>&1 </dev/null &
    fi
    for _ in $(seq 60); do
        engine_answers && break
        sleep 1
    done
    if ! engine_answers; then
        echo "docker-engine: dockerd did not answer within 60 s; its log (/var/log/dockerd.log):" >&2
        tail -20 /var/log/dockerd.log >&2 || true
        exit 1
    fi
fi
echo "docker-engine: $("$(client)" version --format 'engine {{.Server.Version}}, client {{.Client.Version}}'), storage $("$(client)" info --format '{{.Driver}}')"
