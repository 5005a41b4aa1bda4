#!/usr/bin/env bash
# Session 32, run 3 (one H200): the Python review's validation fixes on a GPU (global scales checked
# by value in the GPU upload, 1-byte float types by format, bounds on sizes and ranks): every test
# binary, the Python package (pytest GPU and CPU, the example), the checkpoints, test_parallel_gpu's
# one-GPU tests, and --check of a few layers. Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python checkpoint" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 360 \
  scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python checkpoint" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
grep -E "OK \]|FAILED|PASSED" "$out/test_parallel_gpu_one.txt" | head -8 >> "$log"
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8 gpt-oss-20b:1,8 mixtral-8x7b:8
gpu_pack all
