#!/usr/bin/env bash
# Session 30, run 2: select_range_split by the expected tiles (HEAD, "bin") against the tight tile
# bound (a44ef59, "prev") and main c15402e ("base"), at the points whose split changes (Mixtral
# T = 4 / 5 split, 16 / 32 no longer; Llama-4 T = 4 / 6 / 12 / 32 / 64 / 24 split) and controls.
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=c15402e FP4MOE_STAGE_MORE="prev=a44ef59"
# scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
s=$SECONDS
timeout 150 gpubin/bin/test_moe_gpu --gtest_repeat=5 --gtest_brief=1 \
  --gtest_filter='*Gemm2OverKRanges*:*SplitK*:*OutputBitsDoNotDependOnTheBatch*:*GemmOverlap*' \
  > "$out/test_repeat.txt" 2>&1
_gpu_step "split and range tests x5" $? $((SECONDS - s))
tail -3 "$out/test_repeat.txt" >> "$log"
gpu_check gpubin/bin/fp4moe-bench llama4-scout:4,6,12,32,128 llama4-maverick:4,24 mixtral-8x7b:4,5,16
gpu_variants 3 "llama4-scout:4,6,8,12,16,32,64,128 llama4-maverick:4,12,16,24 mixtral-8x7b:4,5,8,16,32" \
  base prev bin
gpu_pack all
