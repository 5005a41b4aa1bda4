#!/usr/bin/env bash
# Session 25, run 2: the K ranges' middle adds as reductions in L2 (s25-red 758e620) and the ranged
# GEMM2 that keeps its 4-consumer tile where only that one splits (3624236), against main (fb533bf,
# the kernels of 09227df). First the new adds' bit test, the GPU tests, memcheck of the K-ranges
# test and --check on the ranged presets; then the A/B at the points run 1 measured the ranges' cost
# at (Mixtral prefill +6.4/+8.1%, T = 2-4, 128) and at T=2 (the wide tile), DeepSeek-R1 T=8 as the
# control without ranges; then a trace of Mixtral T = 8 / 4096 (run 1 has main's and exp/s24-noranges').
# Stage from s25-red: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_range_add_gpu test_range_add_gpu.txt test_range_add_gpu 30
gpu_tests 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 150
gpu_check gpubin/bin/fp4moe-bench mixtral-8x7b:1,2,3,128,4096 llama4-scout:1,2,4,4096 llama4-maverick:2
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3
gpu_ab red gpubin/bin/fp4moe-bench 330 mixtral-8x7b:2,128,4096,16384 llama4-scout:2,4,4096 llama4-maverick:2 \
  deepseek-r1:8
gpu_trace mixtral-8x7b:8,4096
gpu_pack all
