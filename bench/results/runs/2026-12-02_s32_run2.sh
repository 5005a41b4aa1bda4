#!/usr/bin/env bash
# Session 32, run 2 (one H200): the review's validation fixes on a GPU. test_moe_gpu (a weights view
# in device memory refused by name; validate_topk_ids with a negative count), the one-GPU tests of
# test_parallel_gpu (ParallelMoe::check_device_errors on a one-rank NCCL world; the row kernels),
# test_api (the device-code check passes on Hopper) and every other test binary, the Python package
# (ParallelMoE.check_device_errors bound), memcheck of the new tests, and --check of a few layers
# (the forward itself is unchanged). Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 \
  scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
grep -E "OK \]|FAILED|SKIPPED|PASSED" "$out/test_parallel_gpu_one.txt" | head -20 >> "$log"
GPU_SANITIZE_FILTER='*CreateRefuses*:*OutOfRange*' gpu_sanitize memcheck 120
s=$SECONDS
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_parallel_gpu \
  --gtest_filter='*OutOfRangeExpertIds*' > "$out/memcheck_parallel.txt" 2>&1
_gpu_step "memcheck test_parallel_gpu OutOfRange" $? $((SECONDS - s))
grep -E "SUMMARY|PASSED|FAILED" "$out/memcheck_parallel.txt" >> "$log"
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8 qwen3-30b-a3b:1,8 llama4-scout:1 mixtral-8x7b:1
gpu_pack all
