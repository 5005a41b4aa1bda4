#!/usr/bin/env bash
# Fetches the triton_kernels peer for bench/peers_triton.py: OpenAI's triton_kernels (matmul_ogs,
# routing, swiglu; pure Python over Triton), which vLLM 0.34 runs for gpt-oss's MXFP4 MoE on Hopper.
#
#   bench/triton/fetch.sh [OUT_DIR]        (default build/triton-peer; puts OUT_DIR/triton_kernels/)
#
# triton_kernels is not a package on PyPI. vLLM's build fetches it from the Triton repository into its
# CUDA wheels as vllm/third_party/triton_kernels, so this takes that folder (40 files, about 230 KB)
# out of the vllm 0.34.0 wheel on PyPI, pinned by version and sha256 (the wheel, 239 MB, is kept in
# OUT_DIR and never in this repository). Nothing else of vLLM is used: bench/peers_triton.py calls
# triton_kernels as vLLM's gpt_oss_triton_kernels_moe.py does for this (the "3.5.1") API.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/build/triton-peer}"
version=0.34.0
wheel=vllm-$version-cp38-abi3-manylinux_2_28_x86_64.whl
sha256=79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2

mkdir -p "$out"
if [[ ! -f "$out/$wheel" ]] || ! echo "$sha256  $out/$wheel" | sha256sum -c --status; then
  echo "fetching $wheel from PyPI (239 MB)"
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  echo "vllm==$version --hash=sha256:$sha256" > "$req"
  # (the wheel's own platform and an ABI it serves, so that any staging host can fetch it)
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --python-version 3.12 --implementation cp --require-hashes -r "$req" -d "$out"
  echo "$sha256  $out/$wheel" | sha256sum -c --status || { echo "fetch.sh: sha256 mismatch for $wheel" >&2; exit 1; }
fi
rm -rf "$out/triton_kernels" "$out/unpack"
python3 - "$out/$wheel" "$out/unpack" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("vllm/third_party/triton_kernels/")]
    if not names:
        sys.exit(f"fetch.sh: no vllm/third_party/triton_kernels/ in {sys.argv[1]}")
    z.extractall(sys.argv[2], names)
PY
mv "$out/unpack/vllm/third_party/triton_kernels" "$out/triton_kernels"
rm -rf "$out/unpack"
echo "vllm $version wheel (sha256 $sha256): vllm/third_party/triton_kernels" > "$out/triton_kernels/FROM"
echo "$out/triton_kernels: $(find "$out/triton_kernels" -name '*.py' | wc -l) Python files (and FROM, written here)"
