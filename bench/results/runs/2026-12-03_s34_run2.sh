#!/usr/bin/env bash
# Session 34, run 2 (one H200): the review fixes on a GPU. Every test binary (test_format_gpu's
# misaligned dequantize_mxfp4_gpu output among them), the Python package built here and its pytest
# (the binding's fixes: run_local's global-scale check, max_tokens on both devices, argument errors),
# the example and the generated checkpoints (gpu-check's checkpoint section: the loader's changes),
# then memcheck of the argument-refusal tests. Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python checkpoint" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 420 scripts/gpu-check.sh \
  > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python checkpoint" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED" "$out/check_log.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
GPU_SANITIZE_FILTER='*ForwardRefuses*:*ForwardRejects*:*OutOfRange*' gpu_sanitize memcheck 120 || true
s=$SECONDS
timeout 120 compute-sanitizer --tool memcheck gpubin/bin/test_format_gpu > "$out/memcheck_format.txt" 2>&1
_gpu_step "memcheck test_format_gpu" $? $((SECONDS - s))
tail -3 "$out/memcheck_format.txt" >> "$log"
gpu_pack all
