#!/usr/bin/env bash
# GPU run (session 13, run 2). Staged on exp/s13-both (exp/interleave + exp/plan-coresident) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="il=exp/interleave pc=exp/plan-coresident" \
#   FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# gpubin/bin = both, base = main, il = the interleaved K loop alone, pc = the co-resident plan alone,
# trace = both traced. 1. scripts/gpu-try.sh: test_moe_gpu, memcheck and racecheck (direct GEMM1,
# plan, overlap, DeepSeek-R1), traces at T=1/8, the A/B of both against main (decode and T=2048).
set -u
o=$OUT
FP4MOE_TRY_SANITIZE='*Direct*:*Plan*:*GemmOverlap*:*deepseek*' FP4MOE_TRY_AB_TIMEOUT=250 \
  FP4MOE_TRY_TRACE="deepseek-r1:1,8 qwen3-30b-a3b:1" \
  scripts/gpu-try.sh deepseek-r1:1,8,128,2048 qwen3-30b-a3b:1,8,128 gpt-oss-120b:1,8
echo "gpu-try exit $?" >> $o/try.txt
