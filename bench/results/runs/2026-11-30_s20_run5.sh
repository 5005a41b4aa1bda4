#!/usr/bin/env bash
# Session 20, run 5 (one H200), over gpubin/ staged at exp/ku-major (the chunk-major weight layout:
# every unit of one K chunk of an expert contiguous; one bulk copy per chunk) with base = main
# (3fe65c5's kernels): git checkout exp/ku-major && FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# scripts/stage-gpu.sh. test_moe_gpu on the branch (the repack and the kernels against the
# reference), then the A/B: do the CTAs on one expert's m-blocks reading neighbouring bytes at the
# same time move the weights faster?
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=2 gpu_ab kumajor gpubin/bin/fp4moe-bench 240 deepseek-r1:1,8,32,128,2048 qwen3-30b-a3b:8,128 \
  llama4-scout:8 gpt-oss-120b:8
gpu_pack all
