#!/usr/bin/env bash
# Builds here and copies the test and tool binaries into gpubin/ (git-ignored) for the GPU machine:
# the device tool carries it with `carry: ["gpubin"]`, then scripts/gpu-check.sh runs there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
rm -rf "$root/gpubin" && mkdir -p "$root/gpubin"
cp "$root"/build/tests/test_* "$root/build/fp4moe-bench" "$root/gpubin/"
strip --strip-debug "$root"/gpubin/* 2>/dev/null || true
du -sh "$root/gpubin"
