#!/usr/bin/env bash
# Session 27 run 6: main as it ends the session (the prefetch experiments removed; bound experiments
# off by default, their SASS unchanged): test_moe_gpu, and memcheck of the K-ranges tests (every
# instance: the ranged wide tiles' float4 loads of the running total, c4a0a56) and the tail tests.
# Stage: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 120
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*:*TailTiles*' gpu_sanitize memcheck 200
gpu_pack all
