#!/usr/bin/env bash
# Session 31, run 3 (the build of run 2): racecheck of the K-ranges test's default part in every
# layer and mode, then of its every-config part for the Llama-4-like layer (w4a16).
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_VARIANTS="r32=-DFP4MOE_MAX_RANGE_CHUNKS=32"
# scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*SplitOrNot*' GPU_SANITIZE_TAG=default gpu_sanitize racecheck 140
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*EveryConfig*llama4*w4a16*' GPU_SANITIZE_TAG=configs \
  gpu_sanitize racecheck 140
gpu_pack all
