#!/usr/bin/env bash
# Session 31, run 2: the GPU tests with the K-ranges test in two parts; GEMM2's K ranges of 32 chunks
# ("r32", -DFP4MOE_MAX_RANGE_CHUNKS=32: Llama-4 four ranges, Mixtral seven, up to 2048 split units)
# against main's 64 ("bin"), 2 repetitions; opt-in split-K (batch-dependent bits) against the default
# at T = 1-2, 2 repetitions (what a GEMM1 split would give the few-expert layers); memcheck of the
# K-ranges tests; racecheck of the default part of the Llama-4-like K-ranges instance (never finished
# whole).
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_VARIANTS="r32=-DFP4MOE_MAX_RANGE_CHUNKS=32"
# scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*' gpu_sanitize memcheck 60
gpu_check gpubin/r32/fp4moe-bench llama4-scout:1,8,16,4096 mixtral-8x7b:1,8,4096
gpu_variants 2 "llama4-scout:1,2,4,8,16,32,128,4096 llama4-maverick:1,8,16 mixtral-8x7b:1,2,8,128,4096" bin r32
GPU_AB_REPS=2 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_ARGS=--split-k \
  gpu_ab splitk gpubin/bin/fp4moe-bench 120 llama4-scout:1,2 gpt-oss-120b:1,2 mixtral-8x7b:1,2 qwen3-30b-a3b:1
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*SplitOrNot*llama4*w4a16*' gpu_sanitize racecheck 150
gpu_pack all
