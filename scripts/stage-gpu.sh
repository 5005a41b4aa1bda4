#!/usr/bin/env bash
# Builds here and packs what the GPU machine needs into gpubin/ (git-ignored), which the device tool
# carries (`carry: ["gpubin"]`, 64 MiB at most, hence the compression):
#   gpubin/bin.tar.gz       the test and tool binaries (scripts/gpu-check.sh unpacks it to gpubin/bin)
#   gpubin/cutlass.tar.gz   the CUTLASS/CuTe headers, for building the Python extension there
#   gpubin/pywheels/        build and test dependencies of the Python package for the GPU machine's
#                           Python 3.12 (it has no registry access)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cp "$root"/build/tests/test_* "$root"/build/tests/fp4moe-make-checkpoint "$root"/build/fp4moe-* "$stage/bin/"
strip --strip-debug "$stage"/bin/* 2>/dev/null || true
rm -rf "$root/gpubin" && mkdir -p "$root/gpubin"
tar -C "$stage" -czf "$root/gpubin/bin.tar.gz" bin
tar -C "$root/.deps/cutlass" -czf "$root/gpubin/cutlass.tar.gz" include
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  -d "$root/gpubin/pywheels" scikit-build-core==1.1.2 nanobind==3.1.0 pytest
du -sh "$root"/gpubin/*
size=$(du -sb "$root/gpubin" | cut -f1)
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "stage-gpu: gpubin/ is $size bytes, over the device tool's 64 MiB carry limit"; exit 1
fi
