#!/usr/bin/env bash
# Session 25, run 5 (one H200): the README's tables on main (GEMM2 K ranges: middle ranges added by
# reductions in L2, Mixtral four ranges of 56, a ranged GEMM2 keeps its 4-consumer tile where only
# that one splits; plus this script), after the GPU tests.
# Staged from main: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_tables
gpu_pack all
