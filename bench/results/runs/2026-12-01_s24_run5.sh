#!/usr/bin/env bash
# Session 24, run 5 (one H200): the README's tables on main 365de66 (b731f2e, GEMM2 over canonical
# K ranges split at them where it has few 16-token tiles, plus this script), after the GPU tests.
# Staged from main: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_tables
gpu_pack all
