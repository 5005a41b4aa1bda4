#!/usr/bin/env bash
# Session 36, run 7 (one H200, the last ~4 device minutes): the Python package built there and
# test_gpu.py's test_gpu_errors, whose new cases pass a stream object naming another GPU to a
# forward and to quantize_nvfp4 (refused in Python by the device the object names). Staged with
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="python" FP4MOE_PYTEST_K=gpu_errors FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 150 \
  scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python -k gpu_errors" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED|FP4MOE_TEST_SEED" "$out/check_log.txt" >> "$log"
gpu_pack all
