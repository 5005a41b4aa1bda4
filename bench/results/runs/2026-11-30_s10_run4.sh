#!/usr/bin/env bash
# GPU run (session 10, run 4; run 3 stopped at a test that drew no pick on one shard, fixed). gpubin/bin = exp/plan-permute-v2 (fused permute, token-major),
# gpubin/base = main.
# 1. every test_moe_gpu test of the v2 build; memcheck and racecheck on its fused-permute test
# 2. A/B: the fused permute v2 on/off in one build
set -u
o=$OUT; log=$o/a_run4.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
{
echo "=== test_moe_gpu (all, plan-permute-v2)"; SECONDS=0
timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60
} >> $log 2>&1
if grep -q "=== exit 0" $log; then
  {
  SECONDS=0
  echo "=== memcheck (fused permute, plan)"
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*FusedPermute*:*Plan*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== racecheck (fused permute)"
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*FusedPermute*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== A/B permute v2: gpubin/bin/fp4moe-bench against itself with --no-fused-permute"
  FP4MOE_AB_HEAD_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
    FP4MOE_AB_BASE_ARGS=--no-fused-permute FP4MOE_AB_REPS=3 timeout 300 scripts/gpu-ab.sh \
    deepseek-r1:1,2 qwen3-30b-a3b:1 gpt-oss-120b:1,2 llama4-scout:1,8,16 mixtral-8x7b:1,8
  (cd $o && mv ab ab_permute2 && tar czf ab_permute2.tgz ab_permute2 && rm -rf ab_permute2)
  echo "($SECONDS s)"
  } >> $log 2>&1
fi
