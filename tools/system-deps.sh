#!/usr/bin/env bash
# The system parts `make test` needs beyond Python (Debian or Ubuntu package names):
#   bubblewrap        the grading sandbox (tritoncourse/grading/sandbox/): every learner process in grading
#   chromium          Debian's headless browser for tests/system/test_browser.py
#   docker-compose    Debian's 1.29, validates docker/compose.yaml with no Docker engine
#   fonts-dejavu-core fonts for the browser's screenshots
#   postgresql        Debian's PostgreSQL server for tests/workflows/test_distributed.py (started by the test itself)
#   slurmd slurmctld slurm-client munge
#                     a one-node Slurm for tests/workflows/test_distributed.py's `grade --cluster slurm` (started by the test)
#   nodejs npm passwd login libpam0g, and npm's configurable-http-proxy (pinned)
#                     the course's JupyterHub (hub/, tests/system/test_hub.py); `system-deps.sh hub` installs only these
#   nginx-light       tests/units/test_hub_proxy.py serves hub/nginx-tritonhub.conf (the hub's TLS example); not for `make hub`
# As root (CI, a fresh machine) it installs what is missing with apt-get; as another user it installs nothing and
# names the one command to run. Installs only what is missing: running it again costs a fraction of a second.
set -euo pipefail

packages=()
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
command -v prlimit >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 || packages+=(util-linux)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v docker-compose >/dev/null 2>&1 || packages+=(docker-compose)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || packages+=(fonts-dejavu-core)
# -- issue 21: PostgreSQL's server, which tests/workflows/test_distributed.py starts for a gradebook on PostgreSQL --
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || packages+=(postgresql)
[ -x /usr/sbin/slurmctld ] || packages+=(slurmctld)
[ -x /usr/sbin/slurmd ] || packages+=(slurmd)
command -v sbatch >/dev/null 2>&1 || packages+=(slurm-client)
[ -x /usr/sbin/munged ] || packages+=(munge)
# -- end of issue 21 --
# -- issue 30: the course's JupyterHub (hub/, tests/system/test_hub.py): npm's configurable-http-proxy, PAM, useradd --
CHP_VERSION=5.3.0
hub_packages() {
    command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
    command -v useradd >/dev/null 2>&1 && command -v chpasswd >/dev/null 2>&1 || packages+=(passwd)
    [ -e /etc/pam.d/login ] || packages+=(login)
    compgen -G "/lib/*/libpam.so.0" >/dev/null || compgen -G "/usr/lib/*/libpam.so.0" >/dev/null || packages+=(libpam0g)
}
command -v nginx >/dev/null 2>&1 || packages+=(nginx-light)  # tests/units/test_hub_proxy.py runs hub/nginx-tritonhub.conf
if [ "${1:-}" = hub ]; then packages=(); fi  # `make hub`: only what the hub needs
hub_packages
# -- end of issue 30 --

install_chp() {  # configurable-http-proxy, pinned, from npm (JupyterHub's proxy)
    [ "$(configurable-http-proxy --version 2>/dev/null)" = "$CHP_VERSION" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "The hub needs configurable-http-proxy $CHP_VERSION: sudo npm install -g configurable-http-proxy@$CHP_VERSION" >&2
        return 1
    fi
    echo "system-deps: npm install -g configurable-http-proxy@$CHP_VERSION"
    npm install -g --no-fund --no-audit "configurable-http-proxy@$CHP_VERSION" >/dev/null
}

hub_proxy() {  # `make hub` needs the proxy; `make test` goes on without it (tests/system/test_hub.py then skips, saying why)
    if [ "${1:-}" = hub ]; then install_chp; else install_chp || echo "system-deps: no configurable-http-proxy:" \
        "tests/system/test_hub.py will be skipped" >&2; fi
}

if [ ${#packages[@]} -eq 0 ]; then
    hub_proxy "${1:-}"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "make test needs these system packages: ${packages[*]}" >&2
    echo "Install them with:  sudo $(cd "$(dirname "$0")" && pwd)/system-deps.sh" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "make test needs these system packages: ${packages[*]} (Debian/Ubuntu names); install them with your" \
         "system's package manager." >&2
    exit 1
fi
echo "system-deps: installing ${packages[*]} (apt-get)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
hub_proxy "${1:-}"
