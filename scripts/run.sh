#!/usr/bin/env bash
# Sets up, builds and runs the main job: fp4moe-bench on the DeepSeek-R1 layer (CPU reference on a
# scaled-down layer where no GPU is present). Extra arguments go to fp4moe-bench.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
if [ $# -eq 0 ]; then
  set -- --preset deepseek-r1 --tokens 1,128,8192
  # (--check compares the GPU layer with the CPU reference; without a GPU fp4moe-bench runs the
  # reference alone and refuses --check)
  # ("nvidia-smi -L" exits 0 with "No devices were found" on some machines: a GPU line is asked for)
  if nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then set -- "$@" --check; fi
fi
exec "$root/build/fp4moe-bench" "$@"
