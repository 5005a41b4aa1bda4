#!/usr/bin/env bash
# Session 30, run 4: run 3's table had DeepSeek-R1 T = 8 / 32 / 128 1.6-2.8% slower than session
# 28's (another H200; layers without K ranges, whose kernels changed only in session 29's split-K
# arrival). main (HEAD, "bin") against c15402e ("base"), 5 repetitions, on layers without ranges.
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=c15402e scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_variants 5 "deepseek-r1:8,32,128 qwen3-30b-a3b:8,128" base bin
gpu_pack all
