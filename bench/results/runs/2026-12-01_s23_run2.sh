#!/usr/bin/env bash
# Session 23, run 2 (one H200): direct GEMM1 (T=1) prefetches GEMM2's weights of the token's experts
# into L2 where they take at most 24 MB, from each CTA's producer thread: after its last copy
# (after=exp/s23-g1-w2pf) or before its first (early=exp/s23-g1-w2pf-early). Base main 0e9fd17.
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE_TESTS=1
#   FP4MOE_STAGE_MORE="after=exp/s23-g1-w2pf early=exp/s23-g1-w2pf-early" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
for b in after early; do
  s=$SECONDS
  timeout 150 gpubin/$b/test_moe_gpu > "$out/tests_$b.txt" 2>&1
  _gpu_step "test_moe_gpu $b" $? $((SECONDS - s))
  tail -2 "$out/tests_$b.txt" >> "$log"
done
gpu_check gpubin/early/fp4moe-bench qwen3-30b-a3b:1 llama4-scout:1 gpt-oss-20b:1
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench
specs="qwen3-30b-a3b:1 gpt-oss-20b:1 gpt-oss-120b:1 llama4-scout:1 llama4-maverick:1 deepseek-r1:1"
# shellcheck disable=SC2086
gpu_ab early gpubin/early/fp4moe-bench 200 $specs
# shellcheck disable=SC2086
gpu_ab after gpubin/after/fp4moe-bench 200 $specs
gpu_pack all
