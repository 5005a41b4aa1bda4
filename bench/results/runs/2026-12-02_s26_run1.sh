#!/usr/bin/env bash
# Prepared in session 25 for the next session (not run: session 25's device time was spent). Session
# 25's last test edit ran only on the CPU: the K-ranges GPU test's 5-range layer now has 263 K chunks
# (a last range of 39: an odd last stage for the two-chunk configs). Run the GPU tests with it, the
# K-range adds' bit test, and racecheck of the K-ranges test (it did not finish in 200 s in session
# 24, with two smaller layers; it now has three).
# Stage from main: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_range_add_gpu test_range_add_gpu.txt test_range_add_gpu 30
gpu_tests 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize racecheck 400
gpu_pack all
