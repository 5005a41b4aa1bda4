#!/usr/bin/env bash
# Session 23, run 4 (one H200): main 2e6fd7d (movmatrix epilogue, dynamic GEMM2 units). First a
# 5-repetition A/B of the dynamic units against main before them (static=651084a) at the points
# where run 3 had them +1.0..+1.6% within the spreads, then the README's tables.
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="static=651084a" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=5 GPU_AB_BASE_BIN=gpubin/static/fp4moe-bench \
  gpu_ab dyn5 gpubin/bin/fp4moe-bench 120 deepseek-r1:1,8 qwen3-30b-a3b:1,8
gpu_tables
gpu_pack all
