#!/usr/bin/env bash
# Session 20, run 3 (one H200), over gpubin/ staged at 9519be7 (head: GEMM1's decode epilogue skips
# the activations of a second column block past the tile's tokens, and counts a token tile's unit
# with a release reduction) with base 40e837f and g1h = c390ca7 (exp/g1-handoff: the tile hand-off
# in GEMM1's BN16 kernels too): FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=40e837f
# FP4MOE_STAGE_MORE="g1h=c390ca7" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=2 gpu_ab head gpubin/bin/fp4moe-bench 220 deepseek-r1:8,32,128 qwen3-30b-a3b:8 llama4-scout:8 \
  mixtral-8x7b:8 gpt-oss-20b:8
GPU_AB_REPS=2 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench gpu_ab g1h gpubin/g1h/fp4moe-bench 120 deepseek-r1:8,32,128 \
  qwen3-30b-a3b:8,128
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*:*MaxSms*' gpu_sanitize memcheck 150
gpu_pack all
