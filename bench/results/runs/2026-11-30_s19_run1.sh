#!/usr/bin/env bash
# Session 19, run 1 (one H200), over gpubin/ staged from exp/stream-k 81db187 with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=d0482e2 FP4MOE_STAGE_MORE="pro=bf662f9 sk2=exp/stream-k2"
#   FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# test_moe_gpu (with the new stream-K test), stream-K on against off in one build, the trace of
# DeepSeek-R1 decode, memcheck and racecheck (default filter, now with *StreamK*).
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
export GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-stream-k
gpu_ab sk_onoff gpubin/bin/fp4moe-bench 120 deepseek-r1:8,32,128 qwen3-30b-a3b:32,128
unset GPU_AB_BASE_BIN FP4MOE_AB_BASE_ARGS
gpu_trace deepseek-r1:8,32,128
gpu_sanitize memcheck 120
gpu_sanitize racecheck 240
gpu_pack all
