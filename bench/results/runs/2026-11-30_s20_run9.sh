#!/usr/bin/env bash
# Session 20, run 9 (one H200): run 8 again with the producers' copy issue timed too (from each empty
# wait's return to the stage's last copy instruction; FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1
# scripts/stage-gpu.sh): do the bulk-copy instructions block?
source scripts/gpu-lib.sh
gpu_init
gpu_trace deepseek-r1:8,128 qwen3-30b-a3b:8
gpu_pack all
