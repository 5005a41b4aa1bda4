#!/usr/bin/env bash
# Session 28, run 5: the decode GEMM2's producer without its per-unit proxy fence (the scheduling
# thread's fence covers the units it waited for), head 33fa756 against 14ba126 (run 3's change, main):
# the GPU tests (the overlap tests among them), memcheck of the overlap tests, the A/B at run 3's
# decode points, and the trace build at Qwen3-30B T=8 / DeepSeek-R1 T=8 (run 3 had GEMM2's producer
# in its per-unit setup 17.3 / 8.7% of its time). Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_BASE=14ba126 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*GemmOverlap*' gpu_sanitize memcheck 120
gpu_ab nofence gpubin/bin/fp4moe-bench 300 deepseek-r1:1,8,32,128 qwen3-30b-a3b:1,8,16,128 gpt-oss-20b:8,16 \
  llama4-scout:8,16 gpt-oss-120b:8
gpu_trace qwen3-30b-a3b:8 deepseek-r1:8
gpu_pack all
