#!/usr/bin/env bash
# Session 26, run 2: the head (exp/s26-dyn: the token-major permute, and the wide-tile GEMMs taking
# their work units dynamically, GEMM1 too) through the GPU tests, traces of the prefill it targets,
# then two A/Bs: dyn against the permute alone (gpubin/perm), and the permute against main.
# Stage from exp/s26-dyn: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main \
#   FP4MOE_STAGE_MORE="perm=exp/s26-permute" FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
gpu_trace deepseek-r1:2048,8192 qwen3-30b-a3b:4096
GPU_AB_BASE_BIN=gpubin/perm/fp4moe-bench gpu_ab dyn gpubin/bin/fp4moe-bench 240 deepseek-r1:2048,8192 \
  qwen3-30b-a3b:4096 gpt-oss-120b:2048 mixtral-8x7b:4096 llama4-maverick:4096
gpu_ab perm gpubin/perm/fp4moe-bench 200 deepseek-r1:32,512,2048,8192 qwen3-30b-a3b:128,4096 gpt-oss-120b:2048
gpu_pack all
