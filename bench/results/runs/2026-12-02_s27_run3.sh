#!/usr/bin/env bash
# Prepared in session 26 for the next session (rename to its date): exp/s27-range-f4 (the ranged
# wide tiles load the K-range running total as float4; docs/perf-notes.md, the plan) against main,
# where GEMM2 runs over K ranges with wide tiles (Llama-4, Mixtral prefill), and one point without
# ranges as a control. It changes no bits: the GPU tests' ranged layers compare bits across configs.
# Stage from exp/s27-range-f4: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS; timeout 150 gpubin/bin/test_moe_gpu --gtest_filter='*Gemm2OverKRanges*' > "$out/ranges_test.txt" 2>&1
_gpu_step "K-ranges test" $? $((SECONDS - s)); tail -3 "$out/ranges_test.txt" >> "$log"
gpu_ab range_f4 gpubin/bin/fp4moe-bench 240 mixtral-8x7b:4096,16384 llama4-scout:4096 llama4-maverick:16384 \
  deepseek-r1:2048
gpu_pack all
