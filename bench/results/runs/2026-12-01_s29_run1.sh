#!/usr/bin/env bash
# Session 29, run 1: the split-K arrival as one acq_rel atomic (8c551f4, "fence"), then
# kMaxSplitUnits 1024 (5bb0195, "split": Llama-4 T=16 and Mixtral T = 6-32 split GEMM2 at its K
# ranges), then the tight tile bound (a44ef59, "bin": Mixtral T = 6-8 no longer split), each
# against main c15402e ("base"). The GPU tests, the split and range tests ten times over (the
# arrival's memory order), memcheck of the split tests, --check at the changed points, and the
# four builds in turn. Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=c15402e
# FP4MOE_STAGE_MORE="fence=8c551f4 split=5bb0195" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
s=$SECONDS
timeout 200 gpubin/bin/test_moe_gpu --gtest_repeat=10 --gtest_brief=1 \
  --gtest_filter='*Gemm2OverKRanges*:*SplitK*:*OutputBitsDoNotDependOnTheBatch*:*GemmOverlap*' \
  > "$out/test_repeat.txt" 2>&1
_gpu_step "split and range tests x10" $? $((SECONDS - s))
tail -3 "$out/test_repeat.txt" >> "$log"
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*:*SplitK*' gpu_sanitize memcheck 150
gpu_check gpubin/bin/fp4moe-bench llama4-scout:1,8,16,24,64 llama4-maverick:1,16 mixtral-8x7b:1,2,8,16,32
gpu_variants 3 "llama4-scout:1,8,16,24,64 llama4-maverick:1,8,16 mixtral-8x7b:1,2,8,16,32 deepseek-r1:8" \
  base fence split bin
gpu_pack all
