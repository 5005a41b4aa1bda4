#!/usr/bin/env bash
# Builds here and packs what the GPU machine needs into gpubin/ (git-ignored), which the device tool
# carries (`carry: ["gpubin"]`, 64 MiB at most, hence the compression):
#   gpubin/bin.tar.gz       the test and tool binaries (scripts/gpu-check.sh unpacks it to gpubin/bin)
#   gpubin/cutlass.tar.gz   the CUTLASS/CuTe headers, for building the Python extension there
#   gpubin/pywheels/        build and test dependencies of the Python package for the GPU machine's
#                           Python 3.12 (it has no registry access)
#   gpubin/base/fp4moe-bench  with FP4MOE_STAGE_BASE=REV only: fp4moe-bench built at another commit
#                           (in a temporary git worktree), the "base" of scripts/gpu-ab.sh's A/B
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
stage=$(mktemp -d)
base_wt=""
cleanup() {
  rm -rf "$stage"
  if [ -n "$base_wt" ]; then git -C "$root" worktree remove --force "$base_wt" 2>/dev/null || true; fi
}
trap cleanup EXIT
if [ -n "${FP4MOE_STAGE_BASE:-}" ]; then
  rev=$(git -C "$root" rev-parse --verify "${FP4MOE_STAGE_BASE}^{commit}")
  base_wt=$(mktemp -d)/base
  git -C "$root" worktree add --detach "$base_wt" "$rev" >/dev/null
  ln -s "$root/.deps" "$base_wt/.deps"  # the pinned headers (git-ignored, not in the worktree)
  cmake -S "$base_wt" -B "$base_wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$base_wt/build" -j "${FP4MOE_JOBS:-$(nproc)}" --target fp4moe-bench
fi
mkdir -p "$stage/bin"
cp "$root"/build/tests/test_* "$root"/build/tests/fp4moe-make-checkpoint "$root"/build/fp4moe-* "$stage/bin/"
strip --strip-debug "$stage"/bin/* 2>/dev/null || true
rm -rf "$root/gpubin" && mkdir -p "$root/gpubin"
tar -C "$stage" -czf "$root/gpubin/bin.tar.gz" bin
if [ -n "$base_wt" ]; then
  mkdir -p "$root/gpubin/base"
  cp "$base_wt/build/fp4moe-bench" "$root/gpubin/base/"
  strip --strip-debug "$root/gpubin/base/fp4moe-bench" 2>/dev/null || true
  echo "stage-gpu: gpubin/base/fp4moe-bench is $(git -C "$root" rev-parse --short=12 "$rev")"
fi
tar -C "$root/.deps/cutlass" -czf "$root/gpubin/cutlass.tar.gz" include
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  -d "$root/gpubin/pywheels" scikit-build-core==1.1.2 nanobind==3.1.0 pytest
du -sh "$root"/gpubin/*
size=$(du -sb "$root/gpubin" | cut -f1)
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "stage-gpu: gpubin/ is $size bytes, over the device tool's 64 MiB carry limit"; exit 1
fi
