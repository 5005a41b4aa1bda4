#!/usr/bin/env bash
# Session 42, run 2 (one GPU; the device tool lent an H100 this session): main 5b3307d (session 41's
# GEMM2 prefetch and early GEMM2 scheduling, merged after run 1's A/B): test_moe_gpu, the README's
# tables (DeepSeek-R1 sweep with the torch peers, every preset, w4a4), then racecheck of the two
# overlap tests run 1's racecheck did not reach. Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_tables
GPU_SANITIZE_FILTER='*GemmOverlapGivesTheSameBitsAlsoBackToBack*:*GemmOverlapOnManyRow*'
[ $SECONDS -lt 470 ] && gpu_sanitize racecheck $((570 - SECONDS))
gpu_pack all
