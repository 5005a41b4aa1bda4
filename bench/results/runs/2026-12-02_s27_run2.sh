#!/usr/bin/env bash
# Prepared in session 26 for the next session (rename to its date): exp/s27-gather (GEMM1 gathering
# its rows by one-row TMA boxes, no permute; docs/perf-notes.md, the plan) after run 1's probes said
# the TMA rows keep up. Its GPU tests (the new gather test against the permute first, then all),
# memcheck of the gather test, then an A/B against main where the permute ran: DeepSeek-R1 T = 32 /
# 512 / 2048 / 8192, Qwen3-30B T = 128 / 4096, gpt-oss-120b T=2048.
# Stage from exp/s27-gather: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS; timeout 120 gpubin/bin/test_moe_gpu --gtest_filter='*GatherGemm1*' > "$out/gather_test.txt" 2>&1
_gpu_step "gather test" $? $((SECONDS - s)); tail -3 "$out/gather_test.txt" >> "$log"
gpu_tests 150
GPU_SANITIZE_FILTER='*GatherGemm1*' gpu_sanitize memcheck 200
gpu_ab gather gpubin/bin/fp4moe-bench 240 deepseek-r1:32,512,2048,8192 qwen3-30b-a3b:128,4096 gpt-oss-120b:2048
gpu_pack all
