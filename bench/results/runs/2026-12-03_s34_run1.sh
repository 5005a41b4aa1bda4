#!/usr/bin/env bash
# Session 34, run 1 (one H200): the README's tables at main's head (no kernel change since session 30's
# table run at c0a9723; host code since: the pointer-kind checks in MoeLayer::validate, CLI checks),
# with the layer's --check on every row, the torch peers on the DeepSeek-R1 sweep, and w4a4.
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tables
gpu_pack all
