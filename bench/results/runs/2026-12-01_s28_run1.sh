#!/usr/bin/env bash
# Session 28, run 1: main's GPU tests, then traces of main at the points furthest from the targets
# (the small presets at T = 8-128, DeepSeek-R1 T = 8 / 2048), where session 23's prepared traces
# (s23_run5.sh) were never run. Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1
# scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
gpu_trace qwen3-30b-a3b:1,8,128 deepseek-r1:8,2048 gpt-oss-20b:8,128 llama4-scout:8,16 mixtral-8x7b:128
gpu_pack all
