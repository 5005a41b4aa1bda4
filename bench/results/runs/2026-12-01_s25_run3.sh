#!/usr/bin/env bash
# Session 25, run 3: GEMM2 K ranges of one length per layer (s25-len: Mixtral two ranges of 112
# instead of four of 64; Llama-4 unchanged, two of 64) against main 101df45 (four of 64, middle
# ranges by reductions in L2). Tests first (the K-ranges test now has a 3-range layer and Mixtral's
# own I), memcheck of it, --check of the ranged presets, then the A/B (Mixtral decode and prefill;
# Scout and DeepSeek-R1 T=8 as controls: the same kernels and ranges) and a trace of Mixtral.
# Stage from s25-len: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_range_add_gpu test_range_add_gpu.txt test_range_add_gpu 30
gpu_tests 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 150
gpu_check gpubin/bin/fp4moe-bench mixtral-8x7b:1,2,3,8,128,4096 llama4-scout:1,2
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3
gpu_ab len gpubin/bin/fp4moe-bench 330 mixtral-8x7b:1,2,8,128,4096,16384 llama4-scout:1,4096 deepseek-r1:8
gpu_trace mixtral-8x7b:1,8,4096
gpu_pack all
