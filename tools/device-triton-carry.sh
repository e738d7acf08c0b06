#!/bin/bash
# Developers only: another Triton for the device machine, small enough to carry. The device image holds torch 2.11 and
# triton 3.6.0 and reaches no registry; a Triton wheel is about 200 MB, over a call's 64 MiB. This downloads the
# CPython 3.12 x86-64 wheel of VERSION here, keeps what compiling and launching on an NVIDIA GPU needs (its Python
# files, headers, libdevice, cuobjdump), strips libtriton.so (461 -> 180 MB for 3.7.1) and xz's it (37 MB) with the
# wheel's ptxas (8 MB), and leaves out CUPTI, Proton, the instrumentation and plugin libraries, FileCheck,
# ptxas-blackwell and nvdisasm (the set carried for 3.7.1).
# Measured with 3.7.1 (docs/GPU-RUNS.md, twenty-ninth session): 53 MB, so `.whl` (the course's wheels) cannot travel
# in the same call; the image's numpy serves.
#
# usage:  bash tools/device-triton-carry.sh 3.9.0 .tr39      (DIR must be git-ignored: add /.tr39/ to .git/info/exclude)
# there:  `run` with carry [".tr39"], the command beginning `bash .tr39/unpack.sh && export PYTHONPATH=/tmp/triton-carry:$PWD;`
#         (CUDA 13's own ptxas also works with 3.7.1: TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas).
set -euo pipefail
VERSION=${1:?usage: bash tools/device-triton-carry.sh VERSION DIR}
DIR=${2:?usage: bash tools/device-triton-carry.sh VERSION DIR}
cd "$(dirname "$0")/.."
git check-ignore -q "$DIR" || { echo "$DIR is not ignored by git: add /$DIR/ to .git/info/exclude first"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$work" "triton==$VERSION"
mkdir -p "$work/x" && (cd "$work/x" && unzip -q "$work"/triton-"$VERSION"-*.whl)
t=$work/x/triton
strip --strip-unneeded "$t/_C/libtriton.so"
nice -n 19 xz -T1 -6 -c "$t/_C/libtriton.so" > "$work/libtriton.so.xz"
nice -n 19 xz -T1 -6 -c "$t/backends/nvidia/bin/ptxas" > "$work/ptxas.xz"
rm -f "$t/_C/libtriton.so" "$t/_C/libproton.so" "$t/backends/nvidia/bin/ptxas" "$t/backends/nvidia/bin/ptxas-blackwell" \
      "$t/backends/nvidia/bin/nvdisasm"
rm -rf "$t/backends/nvidia/lib/cupti" "$t/instrumentation" "$t/profiler" "$t/plugins" "$t/FileCheck"
mkdir -p "$DIR"
rm -rf "$DIR/triton" "$DIR"/triton-*.dist-info
cp -r "$t" "$work"/x/triton-"$VERSION".dist-info "$DIR/"
mv "$work/libtriton.so.xz" "$work/ptxas.xz" "$DIR/"
cat > "$DIR/unpack.sh" <<'EOF'
#!/bin/bash
# On the device machine: the carried Triton into /tmp/triton-carry (then PYTHONPATH=/tmp/triton-carry:$PWD).
set -euo pipefail
here=$(dirname "$0")
mkdir -p /tmp/triton-carry
cp -r "$here/triton" "$here"/triton-*.dist-info /tmp/triton-carry/
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
    "$here/libtriton.so.xz" /tmp/triton-carry/triton/_C/libtriton.so
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
    "$here/ptxas.xz" /tmp/triton-carry/triton/backends/nvidia/bin/ptxas
chmod +x /tmp/triton-carry/triton/backends/nvidia/bin/ptxas
PYTHONPATH=/tmp/triton-carry python3 -c "import triton; print('carried triton', triton.__version__, triton.__file__)"
EOF
echo "$DIR: $(du -sh "$DIR" | cut -f1) (the limit of a call's tree: 64 MiB, the repository's ~5 MB included)"
