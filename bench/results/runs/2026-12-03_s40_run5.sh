#!/usr/bin/env bash
# Session 40, run 5 (one H200): BN32 with the GEMM1/GEMM2 overlap and dynamic GEMM2 units (94144cb)
# against its parent (3874699, static BN32 without the overlap): test_moe_gpu (every config, the
# overlap tests forcing BN32, the K-range tests in every config), the A/B at points that run BN32 (9-24 rows per
# expert), then memcheck and racecheck of the overlap tests. Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_BASE=3874699 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_ab bn32overlap gpubin/bin/fp4moe-bench 330 gpt-oss-20b:96,128 deepseek-r1:512,768 qwen3-30b-a3b:256 \
  mixtral-8x7b:64 llama4-scout:256 gpt-oss-120b:512
GPU_SANITIZE_FILTER='*GemmOverlap*OneForward*'
[ $SECONDS -lt 420 ] && gpu_sanitize memcheck 100
[ $SECONDS -lt 440 ] && gpu_sanitize racecheck 140
gpu_pack all
