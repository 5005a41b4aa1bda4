#!/usr/bin/env bash
# Session 19, run 2 (one H200), over gpubin/ staged from exp/stream-k e3ddfda (stream-K of the last
# round and a half only) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=d0482e2 FP4MOE_STAGE_MORE="pro=bf662f9 sk2=exp/stream-k2"
#   FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# (pro: main's prologue fix alone; sk2: stream-K in GEMM2 too). test_moe_gpu, memcheck, then:
#   sk_onoff  stream-K on against off, one build
#   kloop     head with --no-stream-k against pro: the cost of the K loop's 410 SASS instructions
#             per four chunks against 402 (stream-K's second-part copy)
#   head      head against pro
#   prologue  pro against main before it (d0482e2): the prologue's table loads in one loop
#   sk2       stream-K in GEMM2 too against head
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_sanitize memcheck 60
export GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-stream-k
gpu_ab sk_onoff gpubin/bin/fp4moe-bench 120 deepseek-r1:8,32,128 qwen3-30b-a3b:32,128
unset FP4MOE_AB_BASE_ARGS
export GPU_AB_BASE_BIN=gpubin/pro/fp4moe-bench FP4MOE_AB_HEAD_ARGS=--no-stream-k
gpu_ab kloop gpubin/bin/fp4moe-bench 80 deepseek-r1:8,32,128
unset FP4MOE_AB_HEAD_ARGS
gpu_ab head gpubin/bin/fp4moe-bench 200 deepseek-r1:1,8,32,128 gpt-oss-120b:8,128 llama4-maverick:16,128
export GPU_AB_BASE_BIN=gpubin/base/fp4moe-bench
gpu_ab prologue gpubin/pro/fp4moe-bench 120 llama4-scout:1,2 qwen3-30b-a3b:1,2 llama4-maverick:1
export GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench
gpu_ab sk2 gpubin/sk2/fp4moe-bench 80 deepseek-r1:8,32,128
unset GPU_AB_BASE_BIN
gpu_trace deepseek-r1:8,32,128
gpu_pack all
