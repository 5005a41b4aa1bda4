#!/usr/bin/env bash
# Session 20, run 8 (one H200), over gpubin/ staged at main with a trace build whose producers also
# sum their per-unit setup (FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh): where
# the decode GEMMs' producers spend their time (run 7: GEMM2's waits for room only 4-7%).
source scripts/gpu-lib.sh
gpu_init
gpu_trace deepseek-r1:8,128 qwen3-30b-a3b:8
gpu_pack all
