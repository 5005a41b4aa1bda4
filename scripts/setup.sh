#!/usr/bin/env bash
# Installs everything the fp4moe build needs, from Debian packages and PyPI only (the wheel pinned,
# the Debian packages at the versions the release ships).
#   - Debian: cmake, ninja, ccache, GoogleTest (libgtest-dev); python3-venv where python3 lacks venv
#     (scripts/test.sh builds the Python package in a venv) and python3-pip where it lacks pip.
#   - PyPI:   nvidia-cutlass==4.2.0.0, unpacked into .deps/ for its CUTLASS/CuTe headers.
#   - CUDA 13 toolkit (nvcc, cudart, NCCL) must already be installed under /usr/local/cuda.
# Idempotent: a second run does nothing but checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
cutlass_version=4.2.0.0

need_apt=()
for pkg in cmake ninja-build ccache libgtest-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
# (pip fetches the CUTLASS wheel below; Debian's python3 has no pip module without python3-pip)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if ((${#need_apt[@]})); then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: error: the CUDA 13 toolkit (nvcc) is not installed; install it under /usr/local/cuda" >&2
  exit 1
fi

stamp="$deps/cutlass-$cutlass_version.stamp"
if [ ! -f "$stamp" ]; then
  echo "setup: fetching nvidia-cutlass==$cutlass_version (CUTLASS/CuTe headers) from PyPI"
  rm -rf "$deps/cutlass" "$deps/wheel"
  mkdir -p "$deps/wheel"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$deps/wheel" "nvidia-cutlass==$cutlass_version"
  mkdir -p "$deps/cutlass"
  python3 - "$deps/wheel" "$deps/cutlass" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("nvidia_cutlass-*.whl"))
dest = pathlib.Path(sys.argv[2])
prefixes = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for p in prefixes:
            if name.startswith(p) and not name.endswith("/"):
                sub = "include" if p.endswith("source/include/") else "util/include"
                out = dest / sub / name[len(p):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
PY
  test -f "$deps/cutlass/include/cute/tensor.hpp"
  rm -rf "$deps/wheel"
  touch "$stamp"
fi
echo "setup: ok (CUTLASS headers in $deps/cutlass/include)"
