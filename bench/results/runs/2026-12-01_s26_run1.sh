#!/usr/bin/env bash
# Prepared in session 25 for session 26 (session 25's device time was spent). Session
# 25's last test edit ran only on the CPU: the K-ranges GPU test's 5-range layer now has 263 K chunks
# (a last range of 39: an odd last stage for the two-chunk configs). Run the GPU tests with it, the
# K-range adds' bit test, and racecheck of the K-ranges test (it did not finish in 200 s in session
# 24, with two smaller layers; it now has three).
# Session 26 added traces of main where the targets are not met (T=1 few-tile presets, Mixtral
# T=128, DeepSeek-R1 T=2048), to choose the session's kernel work.
# Stage from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_range_add_gpu test_range_add_gpu.txt test_range_add_gpu 30
gpu_tests 150
gpu_trace llama4-scout:1,2 mixtral-8x7b:1,128 qwen3-30b-a3b:1,8 gpt-oss-20b:1,128 deepseek-r1:8,2048
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize racecheck 330
gpu_pack all
