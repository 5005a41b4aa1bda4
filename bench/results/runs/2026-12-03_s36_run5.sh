#!/usr/bin/env bash
# Session 36, run 5 (one H200): a review's fixes over runs 3-4: FP4MOE_CUDA_RETURN's cuda_status and
# the Python binding's check_cuda take the error a failed CUDA call left pending (new test_moe_gpu
# test: a create that cannot allocate its 405 GB, then a layer that runs and matches the
# reference); the Python ParallelMoE and the GPU expert backend check their stream's device;
# check_device_errors checks the current device. test_moe_gpu, test_format_gpu, test_parallel_gpu's
# one-GPU tests and the Python package (built there). Staged with scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt "test_format_gpu" 120 || true
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
s=$SECONDS
FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh \
  > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED|FP4MOE_TEST_SEED" "$out/check_log.txt" >> "$log"
gpu_pack all
