#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest). GPU tests skip, saying why, where no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure "$@"
