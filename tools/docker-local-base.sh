#!/usr/bin/env bash
# The tests' stand-in for python:3.11-slim-bookworm, made where no base image can be pulled (CI's machines):
#
#   bash tools/docker-local-base.sh [IMAGE]      # default IMAGE: triton-course-test-base:bookworm
#
# A Debian bookworm root file system from debootstrap (minbase plus the libraries CPython's modules load),
# this machine's own Python 3.11 copied in at /usr/local as the official image has it (Debian's 3.11.2 is
# older than requirements/lock.txt allows: soupsieve needs >= 3.11.5), and this machine's CA bundle with
# PIP_CERT and SSL_CERT_FILE naming it (HTTPS to the package registries here goes through it). Imported
# with `docker import`; docker/Dockerfile takes it as `--build-arg BASE_CPU=IMAGE`. Nothing of it is for
# learners: their images start from the official python:3.11-slim-bookworm.
#
# PYTHON (default python3) is the interpreter copied: CPython 3.11.5 or newer, built with a shared or a
# static libpython. MIRROR (default http://deb.debian.org/debian) is debootstrap's. An IMAGE that exists is
# kept (remove it to make it again). Needs root and debootstrap (tools/docker-engine.sh installs both).
set -euo pipefail

image=${1:-triton-course-test-base:bookworm}
docker=${DOCKER:-$([ -x /usr/bin/docker ] && echo /usr/bin/docker || echo docker)}
mirror=${MIRROR:-http://deb.debian.org/debian}
python=${PYTHON:-python3}
ca=${CA_BUNDLE:-$(pip config get global.cert 2>/dev/null || echo /etc/ssl/certs/ca-certificates.crt)}

if "$docker" image inspect "$image" >/dev/null 2>&1; then
    echo "docker-local-base: $image exists"
    exit 0
fi
read -r prefix version < <("$python" -c 'import sys; print(sys.base_prefix, "%d.%d.%d" % sys.version_info[:3])')
case "$version" in
    3.11.[5-9] | 3.11.[1-9][0-9]) ;;
    *) echo "docker-local-base: $python is Python $version; CPython 3.11.5 or newer is needed (PYTHON=...)" >&2
       exit 1 ;;
esac
start=$(date +%s)
rootfs=$(mktemp -d /var/tmp/triton-course-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
# The shared libraries the copied CPython's own modules (ssl, ctypes, sqlite3, lzma, readline...) load.
libs=ca-certificates,netbase,tzdata,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,zlib1g,libreadline8
libs+=,libncursesw6,libuuid1,libexpat1,libnsl2,libtirpc3,libcrypt1,libgdbm6,libgdbm-compat4
debootstrap --variant=minbase --include="$libs" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
    tail -20 "$rootfs.log" >&2
    exit 1
}
rm -f "$rootfs.log"
# CPython as python:3.11-slim has it: /usr/local/bin/python3.11, its library and standard library, no
# site-packages of this machine, no test suite, no tkinter or IDLE. Debian's python3 must not be there
# (the copy would find Debian's standard library): minbase installs none, and this checks it.
if [ -e "$rootfs/usr/bin/python3" ]; then
    echo "docker-local-base: debootstrap installed Debian's python3; remove it from the include list" >&2
    exit 1
fi
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/lib"
cp -a "$prefix/bin/python3.11" "$rootfs/usr/local/bin/"
cp -a "$prefix"/lib/libpython3.11.so* "$rootfs/usr/local/lib/" 2>/dev/null || true
tar -C "$prefix/lib" --exclude='python3.11/site-packages/*' --exclude='python3.11/test' \
    --exclude='python3.11/idlelib' --exclude='python3.11/tkinter' --exclude='__pycache__' \
    -cf - python3.11 | tar -C "$rootfs/usr/local/lib" -xf -
for name in python3 python; do ln -sf python3.11 "$rootfs/usr/local/bin/$name"; done
echo /usr/local/lib >"$rootfs/etc/ld.so.conf.d/usr-local.conf"
chroot "$rootfs" /sbin/ldconfig
cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
chroot "$rootfs" /usr/local/bin/python3 -c 'import ssl, ctypes, sqlite3, lzma, bz2, venv, ensurepip; print("python ok")' >/dev/null
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | "$docker" import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    - "$image" >/dev/null
echo "docker-local-base: $image made in $(( $(date +%s) - start )) s (Debian bookworm, Python $version)," \
     "$("$docker" image inspect "$image" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
