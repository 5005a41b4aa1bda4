#!/usr/bin/env bash
# Session 22, run 1 (one H200), over gpubin/ staged from exp/s21-count-on-main (e298a8d: GEMM1's overlap
# count from the producer warpgroup, every consumer thread arriving on `counted`) with base main (8bf9c51)
# and r8 = exp/s21-count-rounds8 (40a1adb, kOverlapMaxRounds 8.0 on top):
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE_TESTS=1 \
#     FP4MOE_STAGE_MORE="r8=exp/s21-count-rounds8" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*OneForwardAtATime*' GPU_SANITIZE_BIN=gpubin/base/test_moe_gpu GPU_SANITIZE_TAG=base \
  gpu_sanitize racecheck 150
GPU_SANITIZE_FILTER='*OneForwardAtATime*' gpu_sanitize racecheck 150
gpu_check gpubin/bin/fp4moe-bench qwen3-30b-a3b:8,16 gpt-oss-20b:8,16 llama4-scout:8,16
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=3 gpu_ab count gpubin/bin/fp4moe-bench 200 qwen3-30b-a3b:8,16 gpt-oss-20b:8,16 llama4-scout:8,16 \
  deepseek-r1:8
GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench gpu_ab r8 gpubin/r8/fp4moe-bench 150 \
  deepseek-r1:8,16 gpt-oss-120b:16 llama4-scout:32 qwen3-30b-a3b:32
gpu_pack all
