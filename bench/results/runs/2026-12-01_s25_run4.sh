#!/usr/bin/env bash
# Session 25, run 4: GEMM2 K ranges of one length at most 64 chunks (s25-len: Mixtral four of 56
# instead of 64, 64, 64 and 32; Llama-4 unchanged) against main (101df45). Tests
# (the K-ranges test with a 5-range layer and Mixtral's own I in four), memcheck of it, then the A/B
# at Mixtral's decode points (run 3: two ranges of 112 won T=1 and lost T = 2-3) and prefill.
# Stage from s25-len: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 150
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3
gpu_ab len56 gpubin/bin/fp4moe-bench 240 mixtral-8x7b:1,2,3,8,128,4096 llama4-scout:1
gpu_pack all
