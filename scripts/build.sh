#!/usr/bin/env bash
# Configures and builds fp4moe into build/ (Release). Runs scripts/setup.sh first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
export PATH="/usr/local/cuda/bin:$PATH"
jobs=${FP4MOE_JOBS:-$(nproc)}
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$jobs"
