#!/usr/bin/env bash
# Sets up, builds and runs the main job: fp4moe-bench on the DeepSeek-R1 layer (CPU reference on a
# scaled-down layer where no GPU is present). Extra arguments go to fp4moe-bench.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
if [ $# -eq 0 ]; then set -- --preset deepseek-r1 --tokens 1,128,8192 --check; fi
exec "$root/build/fp4moe-bench" "$@"
