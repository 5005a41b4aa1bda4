#!/usr/bin/env bash
# Session 24, run 2 (one H200): GEMM2 over canonical K ranges (exp/s24-ranges, c0ce3db: Llama-4 and
# Mixtral GEMM2s sum K in ranges of 64 chunks; split at them by default where GEMM2 has few 16-token
# tiles). Base main. Tests (the new ranges test among them), memcheck of it, --check of the
# presets with ranges, traces of their decode, then an A/B against main at their decode points.
# Staged from exp/s24-ranges: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 200 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 150
gpu_check gpubin/bin/fp4moe-bench llama4-scout:1,2,8,128,2048 mixtral-8x7b:1,2,8,128,2048 llama4-maverick:1,8
gpu_trace llama4-scout:1,8 mixtral-8x7b:1,8
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/base/fp4moe-bench
gpu_ab ranges gpubin/bin/fp4moe-bench 300 llama4-scout:1,2,4,8,16,128 mixtral-8x7b:1,2,8,16,128 \
  llama4-maverick:1,8 deepseek-r1:1,8
gpu_pack all
