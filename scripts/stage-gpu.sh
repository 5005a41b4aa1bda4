#!/usr/bin/env bash
# Builds here and packs what the GPU machine needs into gpubin/ (git-ignored), which the device tool
# carries (`carry: ["gpubin"]`, 64 MiB at most, hence the compression):
#   gpubin/bin.tar.gz       the test and tool binaries (scripts/gpu-check.sh unpacks it to gpubin/bin);
#                           FP4MOE_STAGE_BIN_ONLY="NAME ..." keeps only the ones named
#   gpubin/cutlass.tar.gz   the CUTLASS/CuTe headers, for building the Python extension there (both
#                           Python parts are left out with FP4MOE_STAGE_PYTHON=0: room for more builds)
#   gpubin/pywheels/        build and test dependencies of the Python package for the GPU machine's
#                           Python 3.12 (it has no registry access)
#   gpubin/base/fp4moe-bench(.gz)  with FP4MOE_STAGE_BASE=REV only: fp4moe-bench built at another commit
#                           (in a temporary git worktree), the "base" of scripts/gpu-ab.sh's A/B
#   gpubin/NAME/fp4moe-bench  with FP4MOE_STAGE_MORE="NAME=REV ..." only: more builds at other commits,
#                           for A/Bs of several candidates in one GPU run (FP4MOE_AB_HEAD_BIN); with
#                           FP4MOE_STAGE_MORE_TESTS=1 also gpubin/NAME/test_moe_gpu (and for the base),
#                           e.g. to time a sanitizer on the base's tests (GPU_SANITIZE_BIN)
#   gpubin/trace/fp4moe-bench with FP4MOE_STAGE_TRACE=1 only: the working tree built with
#                           -DFP4MOE_TRACE=ON (in build-trace/), for `fp4moe-bench --trace`'s kernel
#                           timeline; its times are not for comparison (tracing adds barriers and atomics)
#   gpubin/NAME/fp4moe-bench  with FP4MOE_STAGE_VARIANTS="NAME=-DOPTION=VALUE ..." only: the working
#                           tree built with one more CMake option (in build-NAME/), e.g. the bound
#                           experiments (-DFP4MOE_BOUND_EXPERIMENT=N: timing only, wrong results)
#   gpubin/NAME/fp4moe-bench  with FP4MOE_STAGE_TRACE_MORE="NAME=REV ..." only: trace builds at other
#                           commits (e.g. main's timeline next to a branch's)
#   gpubin/marlin/libfp4moe_marlin_peer.so  with FP4MOE_STAGE_MARLIN=1 only: vLLM's Marlin MoE GEMM
#                           (bench/marlin/build.sh, ~1-2 minutes here), for the peers' --marlin-lib
#                           (scripts/gpu-check.sh passes it when it is there)
#   gpubin/humming-wheels/  with FP4MOE_STAGE_HUMMING=1 only: humming-kernels 0.1.19 and the one
#                           dependency the GPU image lacks (cuda-bindings), pinned, for Python 3.12,
#                           for the peers' --humming (gpu-lib.sh's gpu_humming_env installs them)
#   gpubin/triton-peer/triton_kernels/  with FP4MOE_STAGE_TRITON=1 only: OpenAI's triton_kernels out of
#                           the pinned vLLM 0.34.0 wheel (bench/triton/fetch.sh; 239 MB downloaded once
#                           into build/triton-peer), for the peers' --triton (gpu-lib.sh's gpu_triton_env)
# Every build but bin/ is stored as NAME/fp4moe-bench.gz; the GPU scripts unpack it next to itself
# (scripts/gpu-unpack-builds.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
stage=$(mktemp -d)
worktrees=()
cleanup() {
  rm -rf "$stage"
  for wt in "${worktrees[@]}"; do git -C "$root" worktree remove --force "$wt" 2>/dev/null || true; done
}
trap cleanup EXIT
# fp4moe-bench at commit $2 into $stage/$1/ (in a temporary git worktree; ccache makes it quick when
# most translation units match a build already made here); $3 (optional): more CMake options.
build_bench_at() {
  local name=$1 rev wt
  rev=$(git -C "$root" rev-parse --verify "$2^{commit}")
  wt=$(mktemp -d)/$name
  worktrees+=("$wt")
  git -C "$root" worktree add --detach "$wt" "$rev" >/dev/null
  ln -s "$root/.deps" "$wt/.deps"  # the pinned headers (git-ignored, not in the worktree)
  local targets=(fp4moe-bench)
  [ "${FP4MOE_STAGE_MORE_TESTS:-0}" = 1 ] && [ -z "${3:-}" ] && targets+=(test_moe_gpu)
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${3:-} >/dev/null
  cmake --build "$wt/build" -j "${FP4MOE_JOBS:-$(nproc)}" --target "${targets[@]}"
  mkdir -p "$stage/$name"
  cp "$wt/build/fp4moe-bench" "$stage/$name/"
  [ ${#targets[@]} -gt 1 ] && cp "$wt/build/tests/test_moe_gpu" "$stage/$name/"
  strip --strip-debug "$stage/$name"/* 2>/dev/null || true
  echo "stage-gpu: gpubin/$name/fp4moe-bench is $(git -C "$root" rev-parse --short=12 "$rev")"
}
builds=()
[ -n "${FP4MOE_STAGE_BASE:-}" ] && builds+=("base=$FP4MOE_STAGE_BASE")
for spec in ${FP4MOE_STAGE_MORE:-}; do builds+=("$spec"); done
traced=()
for spec in ${FP4MOE_STAGE_TRACE_MORE:-}; do builds+=("$spec"); traced+=("$spec"); done
for spec in "${builds[@]}"; do
  flags=
  for t in "${traced[@]}"; do [ "$t" = "$spec" ] && flags="-DFP4MOE_TRACE=ON -DFP4MOE_BUILD_TESTS=OFF"; done
  case $spec in
    bin=* | pywheels=* | trace=* | *=) echo "stage-gpu: bad build name in '$spec'"; exit 2 ;;
    ?*=?*) build_bench_at "${spec%%=*}" "${spec#*=}" "$flags" ;;
    *) echo "stage-gpu: '$spec' is not NAME=REV"; exit 2 ;;
  esac
done
# fp4moe-bench of the working tree with one more CMake option ($2) in build-$1/, as gpubin/$1/
build_tree_bench() {
  # (--fresh: a name used before with another option must not keep the old one from its cache)
  cmake --fresh -S "$root" -B "$root/build-$1" -G Ninja -DCMAKE_BUILD_TYPE=Release "$2" -DFP4MOE_BUILD_TESTS=OFF \
    >/dev/null
  cmake --build "$root/build-$1" -j "${FP4MOE_JOBS:-$(nproc)}" --target fp4moe-bench
  mkdir -p "$stage/$1"
  cp "$root/build-$1/fp4moe-bench" "$stage/$1/"
  strip --strip-debug "$stage/$1/fp4moe-bench" 2>/dev/null || true
  builds+=("$1=")
}
[ "${FP4MOE_STAGE_TRACE:-0}" = 1 ] && build_tree_bench trace -DFP4MOE_TRACE=ON
# FP4MOE_STAGE_VARIANTS="NAME=-DOPTION=VALUE ...": the working tree with one more CMake option (e.g.
# bound3=-DFP4MOE_BOUND_EXPERIMENT=3), as gpubin/NAME/fp4moe-bench
for spec in ${FP4MOE_STAGE_VARIANTS:-}; do
  for b in "${builds[@]}"; do
    [ "${b%%=*}" = "${spec%%=*}" ] && { echo "stage-gpu: variant name '${spec%%=*}' is taken"; exit 2; }
  done
  case $spec in
    bin=* | pywheels=* | trace=* | base=* | *=) echo "stage-gpu: bad variant name in '$spec'"; exit 2 ;;
    ?*=-D?*=*) build_tree_bench "${spec%%=*}" "${spec#*=}" ;;
    *) echo "stage-gpu: '$spec' is not NAME=-DOPTION=VALUE"; exit 2 ;;
  esac
done
mkdir -p "$stage/bin"
# (test_api opens the stub NVML beside itself: tests/test_gpu_clocks.cpp)
cp "$root"/build/tests/test_* "$root"/build/tests/libfake_nvml.so "$root"/build/tests/fp4moe-make-checkpoint \
  "$root"/build/fp4moe-* "$stage/bin/"
# FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu": only those binaries in bin/ (each is ~13 MB
# before compression; with the peers staged too, all of them exceed the carry limit)
if [ -n "${FP4MOE_STAGE_BIN_ONLY:-}" ]; then
  # shellcheck disable=SC2086  # (split on any white space on purpose)
  only=" $(echo $FP4MOE_STAGE_BIN_ONLY) "
  for b in $only; do
    [ -f "$stage/bin/$b" ] || { echo "stage-gpu: FP4MOE_STAGE_BIN_ONLY names '$b', which the build does not make" >&2; exit 2; }
  done
  for f in "$stage"/bin/*; do
    case "$only" in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
  done
fi
strip --strip-debug "$stage"/bin/* 2>/dev/null || true
rm -rf "$root/gpubin" && mkdir -p "$root/gpubin"
tar -C "$stage" -czf "$root/gpubin/bin.tar.gz" bin
# (the extra builds gzipped, a fifth of their size: scripts/gpu-unpack-builds.sh)
for spec in "${builds[@]}"; do
  mkdir -p "$root/gpubin/${spec%%=*}"
  for f in "$stage/${spec%%=*}"/*; do gzip -c "$f" > "$root/gpubin/${spec%%=*}/$(basename "$f").gz"; done
done
if [ "${FP4MOE_STAGE_MARLIN:-0}" = 1 ]; then
  bash "$root/bench/marlin/build.sh" "$root/build/marlin-peer"
  mkdir -p "$root/gpubin/marlin"
  cp "$root/build/marlin-peer/libfp4moe_marlin_peer.so" "$root/gpubin/marlin/"
fi
if [ "${FP4MOE_STAGE_HUMMING:-0}" = 1 ]; then
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
    --no-deps -d "$root/gpubin/humming-wheels" humming-kernels==0.1.19 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1
fi
if [ "${FP4MOE_STAGE_TRITON:-0}" = 1 ]; then
  bash "$root/bench/triton/fetch.sh" "$root/build/triton-peer"
  rm -rf "$root/gpubin/triton-peer"
  mkdir -p "$root/gpubin/triton-peer"
  cp -r "$root/build/triton-peer/triton_kernels" "$root/gpubin/triton-peer/"
fi
if [ "${FP4MOE_STAGE_PYTHON:-1}" != 0 ]; then
  tar -C "$root/.deps/cutlass" -czf "$root/gpubin/cutlass.tar.gz" include
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    -d "$root/gpubin/pywheels" scikit-build-core==1.1.2 nanobind==3.1.0 pytest
fi
du -sh "$root"/gpubin/*
size=$(du -sb "$root/gpubin" | cut -f1)
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "stage-gpu: gpubin/ is $size bytes, over the device tool's 64 MiB carry limit"; exit 1
fi
