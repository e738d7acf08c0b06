#!/bin/bash
# What this project's CPU machines cannot run (issue 41; docs/JUPYTERHUB.md says what it showed): hub/tritonhub.service
# started by systemd, the learners' limits on cgroup v2 (hub/tritonhub_limits.py) and the docs' disk quotas per
# learner, in a Debian 12 virtual machine (KVM) that boots systemd with cgroup v2 only, as current distributions do.
# The machine here has cgroup v1 for memory, cpu and pids (a controller is in v1 or v2, never both), no systemd as
# PID 1 and a kernel without quota formats (CONFIG_QFMT_V2); Debian's own kernel in the VM has all three.
#
#   sudo bash tools/hub-vm-try.sh SCRATCH     # SCRATCH: a folder of its own (reused: rootfs, packages, the image)
#
# Needs root, debootstrap, qemu-system-x86 (apt-get install qemu-system-x86 debootstrap) and the network
# for Debian's packages and PyPI (jupyterhub for hub/tritonhub_limits.py's imports, pip's configuration on this host).
# The VM has no network; JupyterHub itself is a stand-in (tools/hub_vm_probe.py: no proxy, no PAM), started as the
# unit starts the hub. The results: SCRATCH/out/ (run.log, limits.json). Nothing is left running: the VM powers off.
set -euo pipefail
SCRATCH=$(realpath "${1:?usage: tools/hub-vm-try.sh SCRATCH}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
ROOTFS=$SCRATCH/rootfs
mkdir -p "$SCRATCH"
if [ ! -e "$ROOTFS/boot/vmlinuz" ] && ! ls "$ROOTFS"/boot/vmlinuz-* >/dev/null 2>&1; then
    debootstrap --variant=minbase --include=systemd-sysv,udev,kmod,linux-image-amd64,python3,quota,e2fsprogs,procps,passwd,util-linux,iproute2 \
        bookworm "$ROOTFS" http://deb.debian.org/debian
fi
[ -d "$SCRATCH/site/jupyterhub" ] || python3 -m pip install -q --target "$SCRATCH/site" jupyterhub==6.1.1

# the VM's contents: this checkout's hub/, tritoncourse/ and the probe; the packages; a unit that runs the try
rm -rf "$ROOTFS/opt/try" "$ROOTFS/opt/site"
mkdir -p "$ROOTFS/opt/try/repo"
(cd "$REPO" && git ls-files -z hub tritoncourse tools/hub_vm_probe.py | xargs -0 cp --parents -t "$ROOTFS/opt/try/repo")
cp -a "$SCRATCH/site" "$ROOTFS/opt/site"
echo "/dev/vda / ext4 rw 0 1" > "$ROOTFS/etc/fstab"
echo hubvm > "$ROOTFS/etc/hostname"
cat > "$ROOTFS/opt/try/run.sh" <<'EOF'
#!/bin/bash
OUT=/opt/try/out; mkdir -p $OUT; exec > $OUT/run.log 2>&1
step() { echo; echo "==== $*"; }
step the machine; uname -r; python3 --version; systemctl --version | head -1; stat -fc %T /sys/fs/cgroup/
cat /sys/fs/cgroup/cgroup.controllers
step the unit, installed as docs/JUPYTERHUB.md says, the hub a stand-in
mkdir -p /srv/tritonhub /opt/tritonhub/venv/bin
ln -sf /opt/try/repo/tools/hub_vm_probe.py /opt/tritonhub/venv/bin/jupyterhub
(cd /opt/try/repo && sed "s|/opt/triton-kernels|$PWD|g" hub/tritonhub.service > /etc/systemd/system/tritonhub.service)
python3 -c 'import json, sys; sys.path.insert(0, "/opt/try/repo/hub"); from dataclasses import asdict
from tritonhub_common import Settings; print(json.dumps(asdict(Settings())))' > /srv/tritonhub/settings.json
systemd-analyze verify /etc/systemd/system/tritonhub.service && echo verified
systemctl daemon-reload && systemctl enable --now tritonhub; echo "enable --now: $?"
for i in $(seq 120); do [ -s $OUT/limits.json ] && break; sleep 1; done
systemctl is-active tritonhub; python3 /opt/try/repo/hub/tritonhub.py status
echo "the hub's group: $(cat /proc/$(cat /srv/tritonhub/jupyterhub.pid)/cgroup)"
ls /sys/fs/cgroup/system.slice/tritonhub.service/; cat /sys/fs/cgroup/system.slice/tritonhub.service/cgroup.subtree_control
cat $OUT/limits.json
step systemctl stop; systemctl stop tritonhub; echo "stop: $?"; systemctl is-active tritonhub
ls -d /sys/fs/cgroup/system.slice/tritonhub.service 2>&1; ls /srv/tritonhub
journalctl -u tritonhub --no-pager | tail -8
step disk quotas per learner, the commands of docs/JUPYTERHUB.md on an ext4 home folder of its own
truncate -s 256M /opt/try/home.img && mkfs.ext4 -q -F /opt/try/home.img && mkdir -p /qhome
echo "/opt/try/home.img /qhome ext4 loop,usrquota 0 2" >> /etc/fstab
mount /qhome && quotacheck -cum /qhome && quotaon /qhome && quotaon -p /qhome
groupadd tritoncourse-learners; useradd --create-home --home-dir /qhome/qa -G tritoncourse-learners qa
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
[Install]
WantedBy=multi-user.target
EOF
mkdir -p "$ROOTFS/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/hubvm-try.service "$ROOTFS/etc/systemd/system/multi-user.target.wants/hubvm-try.service"

rm -f "$SCRATCH/vm.img" && truncate -s 4G "$SCRATCH/vm.img" && mkfs.ext4 -q -d "$ROOTFS" "$SCRATCH/vm.img"
KERNEL=$(ls "$ROOTFS"/boot/vmlinuz-* | tail -1); INITRD=$(ls "$ROOTFS"/boot/initrd.img-* | tail -1)
echo "booting $(basename "$KERNEL") (the log: $SCRATCH/serial.log)"
# ACCEL=kvm where /dev/kvm runs stock kernels; this project's CPU machines have KVM through PVM (kvm_pvm, no vmx), which
# boots only PVM guest kernels: Debian's hung there with no output, so the default is qemu's own emulation (slow)
timeout 1500 qemu-system-x86_64 -accel "${ACCEL:-tcg}" -cpu max -m 2048 -smp 2 -kernel "$KERNEL" -initrd "$INITRD" \
    -append "root=/dev/vda rw console=ttyS0 panic=-1" -drive "file=$SCRATCH/vm.img,format=raw,if=virtio" \
    -display none -monitor none -serial "file:$SCRATCH/serial.log" -net none -no-reboot
mkdir -p "$SCRATCH/mnt" && mount -o loop,ro "$SCRATCH/vm.img" "$SCRATCH/mnt"
rm -rf "$SCRATCH/out"; cp -r "$SCRATCH/mnt/opt/try/out" "$SCRATCH/out" || echo "the VM wrote no results"
umount "$SCRATCH/mnt"
cat "$SCRATCH/out/run.log"
