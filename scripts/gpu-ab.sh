#!/usr/bin/env bash
# A/B of two builds on one GPU: gpubin/base/fp4moe-bench (staged with FP4MOE_STAGE_BASE=REV
# scripts/stage-gpu.sh) against gpubin/bin/fp4moe-bench (the working tree), alternated base, head,
# base, head... so that drift and the machine affect both alike; then bench/ab_summary.py's table.
# Runs on the GPU machine from the repository root. Usage:
#   scripts/gpu-ab.sh deepseek-r1:1,8,128 qwen3-30b-a3b:1,512 ...
# env: FP4MOE_AB_REPS (repetitions per build, default 2), FP4MOE_AB_ARGS (more fp4moe-bench arguments,
# default "--routing random"), FP4MOE_AB_BASE_BIN (the base binary, default gpubin/base/fp4moe-bench;
# gpubin/bin/fp4moe-bench with FP4MOE_AB_BASE_ARGS compares one build's options, e.g.
# FP4MOE_AB_BASE_ARGS=--no-tail-tiles), FP4MOE_AB_HEAD_BIN (the head binary, default
# gpubin/bin/fp4moe-bench), FP4MOE_AB_BASE_ARGS / FP4MOE_AB_HEAD_ARGS (more arguments for the base
# or the head runs only, e.g. FP4MOE_AB_HEAD_ARGS=--fused-combine with one binary as both),
# CUDA_VISIBLE_DEVICES as usual. Writes $OUT/ab/*.json and
# $OUT/ab/summary.md; exits non-zero when a run failed.
set -u
out=${OUT:-/tmp/fp4moe-out}/ab
mkdir -p "$out"
if [ ! -d gpubin/bin ] && [ -f gpubin/bin.tar.gz ]; then tar -C gpubin -xzf gpubin/bin.tar.gz; fi
bash scripts/gpu-unpack-builds.sh
head_bin=${FP4MOE_AB_HEAD_BIN:-gpubin/bin/fp4moe-bench} base_bin=${FP4MOE_AB_BASE_BIN:-gpubin/base/fp4moe-bench}
for b in "$head_bin" "$base_bin"; do
  [ -x "$b" ] || { echo "gpu-ab: $b is missing (stage with FP4MOE_STAGE_BASE=REV scripts/stage-gpu.sh)"; exit 2; }
done
[ $# -gt 0 ] || { echo "gpu-ab: give at least one preset:tokens (e.g. deepseek-r1:1,128)"; exit 2; }
status=0
for spec in "$@"; do
  preset=${spec%%:*} tokens=${spec#*:}
  for rep in $(seq 1 "${FP4MOE_AB_REPS:-2}"); do
    for label in base head; do
      b=$head_bin extra=${FP4MOE_AB_HEAD_ARGS:-}
      [ $label = base ] && b=$base_bin extra=${FP4MOE_AB_BASE_ARGS:-}
      timeout 300 "$b" --preset "$preset" --tokens "$tokens" ${FP4MOE_AB_ARGS:---routing random} $extra \
        --json "$out/${label}_${preset}_${rep}.json" > "$out/${label}_${preset}_${rep}.log" 2>&1
      rc=$?
      # (without a GPU fp4moe-bench runs the CPU reference and writes no JSON: a failure here)
      [ $rc = 0 ] && [ ! -s "$out/${label}_${preset}_${rep}.json" ] && rc=3
      echo "=== $label $preset rep $rep exit $rc"
      [ $rc = 0 ] || status=1
    done
  done
done
python3 bench/ab_summary.py "$out" | tee "$out/summary.md"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
