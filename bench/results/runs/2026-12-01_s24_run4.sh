#!/usr/bin/env bash
# Session 24, run 4 (one H200): K ranges with split units up to 512 (exp/s24-ranges: Llama-4 T=8
# now splits GEMM2 at its ranges). Base main. Tests, then an A/B at T >= 2 with 5 repetitions
# (run 3: +0.9 to +2.8% on the layers with ranges, but DeepSeek-R1 T=8, whose kernels are the same
# but for the split counters' offset, +1.5%: two controls without ranges here), the split's own
# effect (the same binary with --no-range-split), and a trace of Llama-4-Scout T=8.
# Staged from exp/s24-ranges: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 200 || { gpu_pack all; exit 1; }
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=5 GPU_AB_BASE_BIN=gpubin/base/fp4moe-bench
gpu_ab ranges gpubin/bin/fp4moe-bench 300 llama4-scout:2,4,8,16 mixtral-8x7b:2,16,128 llama4-maverick:8 \
  deepseek-r1:8 qwen3-30b-a3b:8
GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-range-split \
  gpu_ab split gpubin/bin/fp4moe-bench 120 llama4-scout:1,8 llama4-maverick:8 mixtral-8x7b:1
gpu_trace llama4-scout:8
gpu_pack all
