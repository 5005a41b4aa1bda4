#!/usr/bin/env bash
# Session 32, run 5 (one H200): the session's final main on a GPU: every test binary, the Python
# package (pytest GPU and CPU, the example) and test_parallel_gpu's one-GPU tests.
# Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
grep -E "OK \]|FAILED|PASSED" "$out/test_parallel_gpu_one.txt" | head -8 >> "$log"
gpu_pack all
