#!/usr/bin/env bash
# Session 28, run 3: GEMM2's wait for GEMM1's units (the decode overlap) moved from the producer thread
# to the scheduling thread, one unit ahead (commit after c341e57), against c341e57 (gpubin/base):
# the GPU tests (the back-to-back overlap test among them), memcheck of the overlap tests, an A/B at
# the decode points where GEMM2's producer spent 10-21% of its time in its per-unit setup (run 1's
# traces), and the trace build at two of them. Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_BASE=c341e57 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*GemmOverlap*' gpu_sanitize memcheck 120
gpu_ab sched gpubin/bin/fp4moe-bench 330 deepseek-r1:1,8,32,128 qwen3-30b-a3b:1,8,16,128 gpt-oss-20b:8,16 \
  llama4-scout:8,16 gpt-oss-120b:8
gpu_trace qwen3-30b-a3b:8,128 deepseek-r1:8
gpu_pack all
