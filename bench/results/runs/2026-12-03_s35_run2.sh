#!/usr/bin/env bash
# Session 35, run 2 (one H200): main's Python package built there with its pytest and the example
# (session 34's refactor d7a6968 is under MoE.forward's checks), test_parallel_gpu's one-GPU tests,
# gpu-check's new "large" section (run 1's checks past 2^31 elements, as the script now has them),
# and DeepSeek-R1 at T = 16384 / 32768 with the torch peers in the tables' power state (how far
# the prefill rate goes past the tables' T=8192). Staged with scripts/stage-gpu.sh (Python parts).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="python large" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 420 scripts/gpu-check.sh \
  > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python large" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED|pass \(" "$out/check_log.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=16384,32768 FP4MOE_BIN=gpubin/bin OUT=$out/long \
  timeout 240 scripts/gpu-check.sh deepseek-r1 > "$out/long_log.txt" 2>&1
_gpu_step "deepseek-r1 T = 16384 / 32768 with peers" $? $((SECONDS - s))
grep -E "^\| |^ +[0-9]+ |ceilings" "$out/long_log.txt" >> "$log"
gpu_pack all
