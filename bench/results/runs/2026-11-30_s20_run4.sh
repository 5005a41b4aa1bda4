#!/usr/bin/env bash
# Session 20, run 4 (one H200), over gpubin/ staged at the deferred count (head) with base 9519be7:
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=9519be7 scripts/stage-gpu.sh. test_moe_gpu, memcheck of the
# overlap and direct tests, and the A/B at the points where GEMM1 overlaps GEMM2.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*' gpu_sanitize memcheck 100
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=3 gpu_ab head gpubin/bin/fp4moe-bench 200 deepseek-r1:1,8,32 qwen3-30b-a3b:8 llama4-scout:1,8 \
  mixtral-8x7b:1
gpu_pack all
