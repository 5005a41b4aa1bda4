#!/usr/bin/env bash
# Session 36, run 1 (one H200): the tests after session 36's test review: test_moe_gpu (a create
# refused as unsupported now fails on Hopper instead of skipping; the layer's routing is compared
# bit for bit with route_cpu wherever it routed from logits), test_parallel_gpu's one-GPU tests
# (the NVFP4 wire records poisoned two ways), test_format_gpu, the Python package with fresh seeds
# (tests/python/seeding.py) and memcheck of the tests sessions 35-36 changed. alpha1 and a1_gs now
# share one buffer (set_input_scale_2 writes both with one copy). Staged with scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt "test_format_gpu" 120 || true
s=$SECONDS
FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh \
  > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED|FP4MOE_TEST_SEED" "$out/check_log.txt" >> "$log"
GPU_SANITIZE_FILTER='*PrefillTilesBackToBack*:*OutOfRangeExpertIds*:*PresetTest*deepseek*:*HostileRouting*:*UploadedWeights*' \
  gpu_sanitize memcheck 240 || true
GPU_SANITIZE_BIN=gpubin/bin/test_parallel_gpu GPU_SANITIZE_TAG=parallel GPU_SANITIZE_FILTER='*RowKernels*:*OutOfRange*' \
  gpu_sanitize memcheck 120 || true
gpu_pack all
