#!/usr/bin/env bash
# Session 30, run 3: the README's tables (DeepSeek-R1 sweep with the torch peers, the presets, w4a4)
# on main with session 29's split-K arrival and session 30's range-split rule, the GPU tests first,
# and --check where the rule changed (Mixtral T = 4 / 5 / 16, Scout T = 16). Staged with
# FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_check gpubin/bin/fp4moe-bench llama4-scout:16 mixtral-8x7b:4,5,16
gpu_tables
gpu_pack all
