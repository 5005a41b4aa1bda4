#!/usr/bin/env bash
# Session 32, run 1 (one H200: two were not lent): the early weights (exp/g2-early-weights: GEMM2's first unit in each
# CTA copies its first stage's weights before it waits for GEMM1's units; its BN16 GEMM2 K loops 412
# SASS instructions against main's 400) against main, 3 repetitions, and that build's test_moe_gpu;
# then main's check on one GPU: every test binary, the Python package (built there, pytest CPU and
# GPU, the example) and the generated checkpoints. Staged (on main) with
#   FP4MOE_STAGE_MORE="early=exp/g2-early-weights" FP4MOE_STAGE_MORE_TESTS=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_build_tests early
GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench gpu_ab early gpubin/early/fp4moe-bench 300 \
  qwen3-30b-a3b:1,8 gpt-oss-120b:1,8 llama4-scout:1 deepseek-r1:1,8
s=$SECONDS
FP4MOE_SECTIONS="tests python checkpoint" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 380 \
  scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python checkpoint (main)" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
gpu_pack all
