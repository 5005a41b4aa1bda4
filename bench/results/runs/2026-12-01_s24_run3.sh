#!/usr/bin/env bash
# Session 24, run 3 (one H200): K ranges, second version (exp/s24-ranges f8ba46c: an unsplit unit
# run one range at a time, the ranged BN16 K loops at 400 SASS instructions; run 2's version cost
# T >= 2 1.4-3.9%). Base main. Tests, memcheck and racecheck of the ranges test, --check, traces
# (run 2's failed: the bench's layout lacked the SM count), the A/B of run 2.
# Staged from exp/s24-ranges: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 200 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize racecheck 200
gpu_check gpubin/bin/fp4moe-bench llama4-scout:1,2,8,128,2048 mixtral-8x7b:1,2,8,128,2048 llama4-maverick:1,8
gpu_trace llama4-scout:1,8 mixtral-8x7b:1,8
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/base/fp4moe-bench
gpu_ab ranges gpubin/bin/fp4moe-bench 300 llama4-scout:1,2,4,8,16,128 mixtral-8x7b:1,2,8,16,128 \
  llama4-maverick:1,8 deepseek-r1:1,8
gpu_pack all
