#!/usr/bin/env bash
# Session 23, run 1 (one H200): the two branches session 22 prepared, rebased on main c253e90.
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE_TESTS=1
#   FP4MOE_STAGE_MORE="movm=exp/s22-g1-movm l2pf=exp/s22-l2pf-w2" scripts/stage-gpu.sh
# movm: GEMM1's 16-token w4a16 epilogue stores from registers via movmatrix.
# l2pf: the fused plan-permute prefetches GEMM2's weights into L2 at T=1.
source scripts/gpu-lib.sh
gpu_init
for b in movm l2pf; do
  s=$SECONDS
  timeout 150 gpubin/$b/test_moe_gpu > "$out/tests_$b.txt" 2>&1
  _gpu_step "test_moe_gpu $b" $? $((SECONDS - s))
  tail -2 "$out/tests_$b.txt" >> "$log"
done
GPU_SANITIZE_FILTER='*OneForwardAtATime*:*DirectGemm1*' GPU_SANITIZE_BIN=gpubin/movm/test_moe_gpu \
  GPU_SANITIZE_TAG=movm gpu_sanitize racecheck 150
gpu_check gpubin/movm/fp4moe-bench qwen3-30b-a3b:1,8,16 gpt-oss-20b:8 deepseek-r1:1,8
gpu_check gpubin/l2pf/fp4moe-bench qwen3-30b-a3b:1 gpt-oss-20b:1
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench
gpu_ab movm gpubin/movm/fp4moe-bench 240 qwen3-30b-a3b:1,8,16 gpt-oss-20b:8,16 \
  llama4-scout:8,16 deepseek-r1:1,8,128
gpu_ab l2pf gpubin/l2pf/fp4moe-bench 200 qwen3-30b-a3b:1,2 gpt-oss-20b:1 gpt-oss-120b:1 \
  llama4-scout:1 llama4-maverick:1 deepseek-r1:1
FP4MOE_AB_ARGS="--routing model" gpu_ab l2pf-model gpubin/l2pf/fp4moe-bench 120 \
  qwen3-30b-a3b:1 gpt-oss-20b:1 llama4-scout:1
gpu_pack all
