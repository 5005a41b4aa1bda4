#!/usr/bin/env bash
# Session 23, run 3 (one H200): the decode GEMM2 (BN16, tile hand-off) with dynamically taken work
# units (dyn=exp/s23-dyn2: a counter zeroed by the plan, fetched one ahead by the producer
# warpgroup's thread 32). Base main. Tests, sanitizers on the overlap / direct / split-K / hostile
# tests, --check, then an A/B over the decode token counts of every preset.
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE_TESTS=1 FP4MOE_STAGE_MORE="dyn=exp/s23-dyn2" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
timeout 150 gpubin/dyn/test_moe_gpu > "$out/tests_dyn.txt" 2>&1
rc=$?
_gpu_step "test_moe_gpu dyn" $rc $((SECONDS - s))
tail -2 "$out/tests_dyn.txt" >> "$log"
if [ $rc -ne 0 ]; then grep -E "FAILED|Failure" "$out/tests_dyn.txt" | head -20 >> "$log"; gpu_pack all; exit 1; fi
GPU_SANITIZE_FILTER='*OneForwardAtATime*:*DirectGemm1*:*SplitKMatches*:*EveryTokenOnTheSameExperts*' \
  GPU_SANITIZE_BIN=gpubin/dyn/test_moe_gpu GPU_SANITIZE_TAG=dyn gpu_sanitize racecheck 150
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*:*SplitK*:*HostileRouting*' \
  GPU_SANITIZE_BIN=gpubin/dyn/test_moe_gpu GPU_SANITIZE_TAG=dyn gpu_sanitize memcheck 90
gpu_check gpubin/dyn/fp4moe-bench qwen3-30b-a3b:1,8,32 gpt-oss-20b:16 deepseek-r1:8,128
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench
gpu_ab dyn gpubin/dyn/fp4moe-bench 330 qwen3-30b-a3b:1,8,16,32,128 gpt-oss-20b:8,16,128 \
  gpt-oss-120b:8,16,128 llama4-scout:8,16,128 deepseek-r1:1,8,32,128 mixtral-8x7b:8,128
gpu_pack all
