#!/usr/bin/env bash
# Session 23, prepared as run 5 and NOT run: the device refused a new machine with 155 s left. For
# the next session: traces of main (dynamic GEMM2 units since 2e6fd7d) at the decode points session
# 22 traced (a trace build alone stages in ~1 minute).
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_trace qwen3-30b-a3b:1,8 deepseek-r1:8 gpt-oss-20b:8 llama4-scout:8
gpu_pack all
