#!/bin/bash
# Developers only: another Triton for the device machine, small enough to carry. The device image holds torch 2.11 and
# triton 3.6.0 and reaches no registry; a Triton wheel is about 200 MB, over a call's 64 MiB. This downloads the
# CPython 3.12 x86-64 wheel of VERSION here, keeps what compiling and launching on an NVIDIA GPU needs (its Python
# files, headers, libdevice, cuobjdump), strips libtriton.so (461 -> 180 MB for 3.7.1) and xz's it (37 MB) with the
# wheel's ptxas for Hopper (8 MB), and leaves out CUPTI, Proton, the instrumentation and plugin libraries, FileCheck, AMD's
# headers and libraries, ptxas-blackwell and nvdisasm (the set carried for 3.7.1, and 3.9.0's additions).
# Measured with 3.7.1 (docs/GPU-RUNS.md, twenty-ninth session): 53 MB; 3.9.0 at xz -9 (3 min here): 61 MB, libtriton
# 38 MB and ptxas-blackwell 12 MB, which 3.9.0 compiles sm_90a with (checked here with pyenv's Python 3.12: a kernel
# compiled for GPUTarget("cuda", 90, 32)); with the repository's ~4.4 MB that is 65 of a call's 67.1 MB (64 MiB), so
# `.whl` (the course's wheels) cannot travel in the same call: the image's numpy serves.
#
# usage:  bash tools/device-triton-carry.sh 3.9.0 .tr39      (DIR must be git-ignored: add /.tr39/ to .git/info/exclude)
# there:  `run` with carry [".tr39"], the command beginning `bash .tr39/unpack.sh && export PYTHONPATH=/tmp/triton-carry:$PWD;`
#         (CUDA 13's own ptxas also works with 3.7.1: TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas).
set -euo pipefail
VERSION=${1:?usage: bash tools/device-triton-carry.sh VERSION DIR}
DIR=${2:?usage: bash tools/device-triton-carry.sh VERSION DIR}
cd "$(dirname "$0")/.."
git check-ignore -q "${DIR%/}/" || { echo "$DIR is not ignored by git: add /$DIR/ to .git/info/exclude first"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$work" "triton==$VERSION"
mkdir -p "$work/x" && (cd "$work/x" && unzip -q "$work"/triton-"$VERSION"-*.whl)
t=$work/x/triton
# the ptxas that compiles for Hopper (sm_90a): 3.7.1 keeps ptxas-blackwell for arch >= 100, 3.9.0 uses it from 90 on
if grep -q "ptxas_blackwell if arch >= 100" "$t/backends/nvidia/compiler.py"; then ptxas=ptxas; else ptxas=ptxas-blackwell; fi
strip --strip-unneeded "$t/_C/libtriton.so"
nice -n 19 xz -T1 -9 -c "$t/_C/libtriton.so" > "$work/libtriton.so.xz"
nice -n 19 xz -T1 -9 -c "$t/backends/nvidia/bin/$ptxas" > "$work/$ptxas.xz"
rm -f "$t/_C/libtriton.so" "$t/_C/libproton.so" "$t/backends/nvidia/bin/ptxas" "$t/backends/nvidia/bin/ptxas-blackwell" \
      "$t/backends/nvidia/bin/nvdisasm"
rm -rf "$t/backends/nvidia/lib"/cupti* "$t/instrumentation" "$t/profiler" "$t/plugins" "$t/FileCheck" \
       "$t/include" "$t/backends/amd/include" "$t/backends/amd/lib"/*.so  # 3.9.0 adds its C++ headers, cupti-blackwell and a 105 MB AMD codegen library
mkdir -p "$DIR"
rm -rf "$DIR/triton" "$DIR"/triton-*.dist-info
cp -r "$t" "$work"/x/triton-"$VERSION".dist-info "$DIR/"
rm -f "$DIR"/ptxas*.xz
mv "$work/libtriton.so.xz" "$work/$ptxas.xz" "$DIR/"
cat > "$DIR/unpack.sh" <<'EOF'
#!/bin/bash
# On the device machine: the carried Triton into /tmp/triton-carry (then PYTHONPATH=/tmp/triton-carry:$PWD).
set -euo pipefail
here=$(dirname "$0")
mkdir -p /tmp/triton-carry
cp -r "$here/triton" "$here"/triton-*.dist-info /tmp/triton-carry/
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
    "$here/libtriton.so.xz" /tmp/triton-carry/triton/_C/libtriton.so
for x in "$here"/ptxas*.xz; do  # the Hopper ptxas, under its own name (ptxas or ptxas-blackwell)
    bin=/tmp/triton-carry/triton/backends/nvidia/bin/$(basename "$x" .xz)
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$x" "$bin"
    chmod +x "$bin"
done
PYTHONPATH=/tmp/triton-carry python3 -c "import triton; print('carried triton', triton.__version__, triton.__file__)"
EOF
echo "$DIR: $(du -sh "$DIR" | cut -f1) (the limit of a call's tree: 64 MiB, the repository's ~5 MB included)"
