#!/usr/bin/env bash
# Session 42, run 1 (asked for an H200, ran on an H100): exp/gemm2-wfirst (direct GEMM1 lets GEMM2 be scheduled from a spare
# producer warp once the plan is complete; GEMM2's first unit brings its first stages' weights into
# L2 while it waits for GEMM1's units) against main 4e31a18: test_moe_gpu (also session 40's unrun
# GemmOverlapOnManyRowBn32TilesGivesTheSameBits), --check, the A/B at the decode points the change
# can touch (T = 1 above all), then racecheck of the overlap and direct tests. Staged with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=4e31a18 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_check gpubin/bin/fp4moe-bench qwen3-30b-a3b:1,8 gpt-oss-20b:1 llama4-scout:1 deepseek-r1:1
gpu_ab wfirst gpubin/bin/fp4moe-bench 300 qwen3-30b-a3b:1,8 deepseek-r1:1,8 gpt-oss-120b:1 gpt-oss-20b:1,8 \
  llama4-scout:1 mixtral-8x7b:1
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*'
[ $SECONDS -lt 480 ] && gpu_sanitize racecheck 100
gpu_pack all
