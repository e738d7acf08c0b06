#!/bin/bash
# What this project's CPU machines cannot run (issue 41; docs/JUPYTERHUB.md says what it showed): the real JupyterHub
# started by systemd from hub/tritonhub.service, a learner's PAM log-in, their server under the limits on cgroup v2
# (hub/tritonhub_limits.py), jupyterhub-idle-culler, and the docs' disk quotas per learner, in a Debian 12 virtual
# machine that boots systemd with cgroup v2 only, as current distributions do. The machine here has cgroup v1 for
# memory, cpu and pids (a controller is in v1 or v2, never both), no systemd as PID 1 and a kernel without quota
# formats (CONFIG_QFMT_V2); Debian's own kernel in the VM has all three.
#
#   sudo bash tools/hub-vm-try.sh SCRATCH     # SCRATCH: a folder of its own (reused: rootfs; remade: the image)
#
# Needs root, debootstrap, qemu-system-x86 (apt-get install qemu-system-x86 debootstrap), Debian's mirror for the
# root filesystem, this checkout's .venv (make venv) with requirements/hub.txt, and configurable-http-proxy
# (tools/system-deps.sh hub). The VM has no network: what the hub needs is carried in, Debian 12's route of
# docs/JUPYTERHUB.md ("A Python for the hub"): this machine's Python (PY_HOME, default .venv's base interpreter,
# 3.11.5 or newer; Debian 12's own is 3.11.2) copied whole to /opt/python, the hub's venv made there by it with
# .venv's packages (not playwright) and this checkout's tritoncourse, configurable-http-proxy's npm folder (node is
# Debian's nodejs). In the VM: `tritonhub.py setup`, `users`, the unit enabled, tools/hub_vm_session.py for a learner.
# The results: SCRATCH/out/ (run.log, session.json). Nothing is left running: the VM powers off.
set -euo pipefail
SCRATCH=$(realpath "${1:?usage: tools/hub-vm-try.sh SCRATCH}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
ROOTFS=$SCRATCH/rootfs
PY_HOME=$(realpath "${PY_HOME:-$("$REPO/.venv/bin/python" -c 'import sys; print(sys.base_prefix)')}")
CHP=$(dirname "$(dirname "$(readlink -f "$(command -v configurable-http-proxy)")")")  # its npm package folder
mkdir -p "$SCRATCH"
if [ ! -e "$ROOTFS/boot/vmlinuz" ] && ! ls "$ROOTFS"/boot/vmlinuz-* >/dev/null 2>&1; then
    debootstrap --variant=minbase --include=systemd-sysv,udev,kmod,linux-image-amd64,python3,quota,e2fsprogs,procps,passwd,util-linux,iproute2,curl,git,nodejs,libssl3,libsqlite3-0,libffi8,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6,libexpat1,libuuid1,libnsl2,libtirpc3 \
        bookworm "$ROOTFS" http://deb.debian.org/debian
fi

# the VM's contents: this checkout's tracked course and hub files (in a git index of their own: setup copies the
# course with git ls-files), the interpreter, the hub's venv, the proxy; a unit that runs the try
rm -rf "$ROOTFS/opt/try" "$ROOTFS/opt/site" "$ROOTFS/opt/python" "$ROOTFS/opt/tritonhub"
mkdir -p "$ROOTFS/opt/try/repo"
(cd "$REPO" && git ls-files -z hub tritoncourse source nbgrader_config.py requirements \
    | xargs -0 cp --parents -t "$ROOTFS/opt/try/repo" && cp --parents tools/hub_vm_session.py "$ROOTFS/opt/try/repo")
chroot "$ROOTFS" sh -c 'cd /opt/try/repo && git init -q && git add -A'
"$REPO/.venv/bin/python" - "$PY_HOME" "$ROOTFS/opt/python" <<'PY'
import shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(src, dst, symlinks=True, ignore=lambda d, names: [n for n in names if n in ("__pycache__", "test")
                or (n == "site-packages" and Path(d).name.startswith("python"))])
(dst / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages").mkdir()
old, new = str(src / "lib").encode() + b"\0", b"$ORIGIN/../lib"  # a RUNPATH naming the original's lib/ (pyenv's)
for exe in (dst / "bin").glob("python3*"):
    if exe.is_file() and not exe.is_symlink() and old in (data := exe.read_bytes()):
        exe.write_bytes(data.replace(old, new + b"\0" * (len(old) - len(new))))
PY
# the venv as `python -m venv --without-pip` makes it (written here: in a chroot without /proc the copy cannot find
# its $ORIGIN, so it cannot run before the VM boots)
VENV=$ROOTFS/opt/tritonhub/venv
VER=$("$REPO/.venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SITE=lib/python$VER/site-packages
mkdir -p "$VENV/bin" "$VENV/$SITE" && ln -s lib "$VENV/lib64"
printf 'home = /opt/python/bin\ninclude-system-site-packages = false\nversion = %s\n' \
    "$("$REPO/.venv/bin/python" -c 'import platform; print(platform.python_version())')" > "$VENV/pyvenv.cfg"
for name in python python3 "python$VER"; do ln -s "/opt/python/bin/python$VER" "$VENV/bin/$name"; done
tar -C "$REPO/.venv" -c --exclude="$SITE/playwright" --exclude="$SITE/__editable__*" "$SITE" share etc \
    | tar -C "$VENV" -x
(cd "$REPO" && git ls-files -z tritoncourse | xargs -0 cp --parents -t "$VENV/$SITE")
for script in "$REPO"/.venv/bin/*; do
    if [ -f "$script" ] && [ ! -L "$script" ] && head -1 "$script" | grep -qa '^#!.*python'; then
        { echo "#!/opt/tritonhub/venv/bin/python"; tail -n +2 "$script"; } > "$VENV/bin/$(basename "$script")"
        chmod 755 "$VENV/bin/$(basename "$script")"
    fi
done
# qemu's emulation (below) is many times slower than the machine: node takes longer than the 10 s JupyterHub waits for
# the proxy (a fixed wait in jupyterhub/proxy.py, raised in the VM's copy), and a server longer to start than the
# course's 180 s (the VM's copy of hub/jupyterhub_config.py gets more). Nothing else of the hub is changed.
sed -i 's/server.wait_up(10)/server.wait_up(300)/; s/wait_timeout = 15$/wait_timeout = 320/' \
    "$VENV/$SITE/jupyterhub/proxy.py"
grep -q "wait_up(300)" "$VENV/$SITE/jupyterhub/proxy.py"
printf '\n# tools/hub-vm-try.sh: qemu emulates the VM\nc.Spawner.start_timeout = c.Spawner.http_timeout = 900\n' \
    >> "$ROOTFS/opt/try/repo/hub/jupyterhub_config.py"
mkdir -p "$ROOTFS/usr/lib/node_modules" && rm -rf "$ROOTFS/usr/lib/node_modules/configurable-http-proxy"
cp -a "$CHP" "$ROOTFS/usr/lib/node_modules/configurable-http-proxy"
ln -sf ../lib/node_modules/configurable-http-proxy/bin/configurable-http-proxy "$ROOTFS/usr/bin/configurable-http-proxy"
echo "/dev/vda / ext4 rw 0 1" > "$ROOTFS/etc/fstab"
echo hubvm > "$ROOTFS/etc/hostname"
cat > "$ROOTFS/opt/try/run.sh" <<'EOF'
#!/bin/bash
OUT=/opt/try/out; mkdir -p $OUT; exec > $OUT/run.log 2>&1
step() { echo; echo "==== $(date +%T) $*"; }
step the machine; uname -r; python3 --version; systemctl --version | head -1; stat -fc %T /sys/fs/cgroup/
cat /sys/fs/cgroup/cgroup.controllers; /opt/tritonhub/venv/bin/python --version; node --version
step "setup with the hub's Python carried in (/opt/python), as docs/JUPYTERHUB.md says; no assignment generated"
cd /opt/try/repo
python3 hub/tritonhub.py setup --existing-venv --venv /opt/tritonhub/venv --assignments \
    --chp /usr/bin/configurable-http-proxy --mem-limit 512M --cpu-limit 0.5 --pids-limit 128 --idle-timeout 240
echo "setup: $?"
PW=vm-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
printf 'id,first_name,last_name,email,password\nada-l,Ada,Lovelace,ada@example.edu,%s\n' "$PW" > /opt/try/roster.csv
python3 hub/tritonhub.py users /opt/try/roster.csv; echo "users: $?"
step the unit, installed as docs/JUPYTERHUB.md says
sed "s|/opt/triton-kernels|$PWD|g" hub/tritonhub.service > /etc/systemd/system/tritonhub.service
systemd-analyze verify /etc/systemd/system/tritonhub.service && echo verified
systemctl daemon-reload && systemctl enable --now tritonhub; echo "enable --now: $?"
for i in $(seq 900); do curl -fs http://127.0.0.1:8000/hub/api/ && break; sleep 1; done; echo " (after $i s)"
systemctl is-active tritonhub; python3 hub/tritonhub.py status
echo "the hub's group: $(cat /proc/$(cat /srv/tritonhub/jupyterhub.pid)/cgroup)"
systemd-cgls --no-pager -u tritonhub.service
step "the learner's session (tools/hub_vm_session.py): PAM log-in, the server's limits, the kernel's cells, the culler"
/opt/tritonhub/venv/bin/python tools/hub_vm_session.py ada-l "$PW" $OUT/session.json; cat $OUT/session.json
ls /sys/fs/cgroup/system.slice/tritonhub.service/ /sys/fs/cgroup/system.slice/tritonhub.service/tritonhub-learners
step the hub\'s journal; journalctl -u tritonhub --no-pager | grep -iE "cull|limit|oom|ada-l|error" | tail -40
step systemctl stop; systemctl stop tritonhub; echo "stop: $?"; systemctl is-active tritonhub
ls -d /sys/fs/cgroup/system.slice/tritonhub.service 2>&1
journalctl -u tritonhub --no-pager > $OUT/journal.log; tail -5 $OUT/journal.log
step disk quotas per learner, the commands of docs/JUPYTERHUB.md on an ext4 home folder of its own
truncate -s 256M /opt/try/home.img && mkfs.ext4 -q -F /opt/try/home.img && mkdir -p /qhome
echo "/opt/try/home.img /qhome ext4 loop,usrquota 0 2" >> /etc/fstab
mount /qhome && quotacheck -cum /qhome && quotaon /qhome && quotaon -p /qhome
useradd --create-home --home-dir /qhome/qa -G tritoncourse-learners qa
useradd --create-home --home-dir /qhome/qb -G tritoncourse-learners qb
for u in $(getent group tritoncourse-learners | cut -d: -f4 | tr , ' '); do setquota -u "$u" 20M 24M 0 0 /qhome; done
su qa -s /bin/sh -c 'dd if=/dev/zero of=/qhome/qa/big bs=1M count=64 status=none; echo "qa dd exit $?"; ls -l /qhome/qa/big'
su qb -s /bin/sh -c 'dd if=/dev/zero of=/qhome/qb/ok bs=1M count=10 status=none; echo "qb dd exit $?"'
sync; quotasync /qhome; repquota /qhome
step done; systemctl poweroff
EOF
chmod +x "$ROOTFS/opt/try/run.sh"
cat > "$ROOTFS/etc/systemd/system/hubvm-try.service" <<'EOF'
[Unit]
Description=tools/hub-vm-try.sh's try
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/opt/try/run.sh
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
EOF
mkdir -p "$ROOTFS/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/hubvm-try.service "$ROOTFS/etc/systemd/system/multi-user.target.wants/hubvm-try.service"

rm -f "$SCRATCH/vm.img" && truncate -s 8G "$SCRATCH/vm.img" && mkfs.ext4 -q -d "$ROOTFS" "$SCRATCH/vm.img"
KERNEL=$(ls "$ROOTFS"/boot/vmlinuz-* | tail -1); INITRD=$(ls "$ROOTFS"/boot/initrd.img-* | tail -1)
echo "booting $(basename "$KERNEL") (the log: $SCRATCH/serial.log)"
# ACCEL=kvm where /dev/kvm runs stock kernels; this project's CPU machines have KVM through PVM (kvm_pvm, no vmx), which
# boots only PVM guest kernels: Debian's hung there with no output, so the default is qemu's own emulation (slow)
timeout "${VM_TIMEOUT:-3000}" qemu-system-x86_64 -accel "${ACCEL:-tcg}" -cpu max -m 3072 -smp 2 -kernel "$KERNEL" \
    -initrd "$INITRD" -append "root=/dev/vda rw console=ttyS0 panic=-1" \
    -drive "file=$SCRATCH/vm.img,format=raw,if=virtio" -display none -monitor none \
    -serial "file:$SCRATCH/serial.log" -net none -no-reboot || echo "qemu: exit $?"
# the results read from the image without mounting it (debugfs: also after a VM that was stopped, its journal unplayed)
rm -rf "$SCRATCH/out"; debugfs -R "rdump /opt/try/out $SCRATCH" "$SCRATCH/vm.img" || echo "the VM wrote no results"
cat "$SCRATCH/out/run.log"
