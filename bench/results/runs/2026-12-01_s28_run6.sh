#!/usr/bin/env bash
# Session 28, run 6: the trace build of a442c99, which splits the producer's per-unit setup (the lookup
# up to its result, the rest) and adds its time taking units, at the decode points where GEMM2's
# producer spent 8-17% of its time in its setup (runs 3 and 5). Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_trace qwen3-30b-a3b:8,128 deepseek-r1:8,2048 llama4-scout:8
gpu_pack all
