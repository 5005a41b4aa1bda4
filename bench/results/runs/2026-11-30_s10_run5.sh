#!/usr/bin/env bash
# GPU run (session 10, run 5). gpubin/bin = exp/plan-permute-v2 at its 256-thread plan variant.
# The fused permute's GPU tests, then one build with and without --no-fused-permute.
set -u
o=$OUT; log=$o/a_run5.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*FusedPermute*:*Plan*:*deepseek*w4a16*:*llama4_scout*' 2>&1 | tail -3
echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $log 2>&1
if grep -q "=== exit 0" $log; then
  FP4MOE_AB_HEAD_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
    FP4MOE_AB_BASE_ARGS=--no-fused-permute FP4MOE_AB_REPS=3 timeout 200 scripts/gpu-ab.sh \
    deepseek-r1:1,2 qwen3-30b-a3b:1 llama4-scout:16 >> $log 2>&1
  echo "($SECONDS s)" >> $log
fi
