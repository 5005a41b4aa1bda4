#!/usr/bin/env bash
# Session 22, run 2 (one H200), over gpubin/ staged from main (1fce17b: run 1's merged overlap count) with
# any = exp/s22-overlap-any (the overlap wherever GEMM1 has 16-token tiles, bench only):
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="any=exp/s22-overlap-any" scripts/stage-gpu.sh
# racecheck of the default filter (the full overlap test among them) on main's new count, then where the
# overlap pays beyond 5.5 expected rounds now that the consumers no longer wait for a release per tile.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_sanitize racecheck 200
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=2 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench gpu_ab any gpubin/any/fp4moe-bench 330 \
  deepseek-r1:8,16,32,128 qwen3-30b-a3b:64,128 qwen3-235b-a22b:16,32,128 llama4-scout:32,64,128 \
  llama4-maverick:16,32,128 mixtral-8x7b:8,16,32 gpt-oss-120b:16,32,128 gpt-oss-20b:64
gpu_pack all
