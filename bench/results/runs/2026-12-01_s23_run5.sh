#!/usr/bin/env bash
# Session 23, run 5 (one H200, the session's last ~150 s of device time): traces of main a141ff0
# (dynamic GEMM2 units) at the decode points session 22 traced, for the next session's plan.
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_trace qwen3-30b-a3b:1,8 deepseek-r1:8 gpt-oss-20b:8
gpu_pack all
