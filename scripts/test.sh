#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest). GPU tests skip, saying why, where no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure "$@"

# ---- python (issue 7): `pip install ./` into a venv under build/, then the binding's tests (the
# CPU ones run here; tests/python/test_gpu.py skips, saying why, without torch and a GPU).
venv="$root/build/python-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check numpy==2.4.6 pytest==9.2.0 ml_dtypes==0.7.0
(cd "$root" && "$venv/bin/python" -m pip install -q --disable-pip-version-check ./ -Ccmake.build-type=Release)
(cd "$root" && "$venv/bin/python" -m pytest tests/python -q -rs -p no:cacheprovider)
