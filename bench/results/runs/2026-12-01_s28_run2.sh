#!/usr/bin/env bash
# Session 28, run 2: BN80 with two K chunks a stage (BN80_C4_S4_x1_c2: the barrier wait, release and
# stage arithmetic once per two chunks; 8 chunk slots against BN80_C4_S9_x1's 9) as the 57-64 rows
# regime's config, against main (gpubin/base). Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_BASE=HEAD scripts/stage-gpu.sh over a working tree that adds the config and selects it.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:2048 gpt-oss-120b:2048 qwen3-30b-a3b:1024
GPU_AB_REPS=2 gpu_ab bn80c2 gpubin/bin/fp4moe-bench 300 deepseek-r1:2048 gpt-oss-120b:2048 qwen3-30b-a3b:1024
gpu_pack all
