#!/usr/bin/env bash
# GPU run (session 10, run 1). gpubin/bin = exp/plan-permute (rebased on main 9612639),
# gpubin/base = main, gpubin/fc2 = exp/fused-combine-v2 (rebased on main; fp4moe-bench and a gzipped
# test_moe_gpu).
# 1. every test_moe_gpu test of the plan-permute build; memcheck and racecheck on its fused-permute test
# 2. fused-combine v2: its GPU test, memcheck on it
# 3. A/B: the fused permute on/off in one build; the fused combine v2 on/off in one build
set -u
o=$OUT; log=$o/a_run1.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
[ -f gpubin/fc2/test_moe_gpu.gz ] && gunzip gpubin/fc2/test_moe_gpu.gz && chmod +x gpubin/fc2/test_moe_gpu
export NCCL_NVLS_ENABLE=0
ab() {  # name specs...
  local name=$1; shift
  echo "=== A/B $name: ${FP4MOE_AB_HEAD_BIN} ${FP4MOE_AB_HEAD_ARGS:-} against ${FP4MOE_AB_BASE_BIN} ${FP4MOE_AB_BASE_ARGS:-}"
  FP4MOE_AB_REPS=${REPS:-2} timeout 300 scripts/gpu-ab.sh "$@"
  (cd $o && mv ab ab_$name && tar czf ab_$name.tgz ab_$name && rm -rf ab_$name)
}
{
echo "=== test_moe_gpu (all, plan-permute)"; SECONDS=0
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
  FP4MOE_AB_HEAD_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
    FP4MOE_AB_BASE_ARGS=--no-fused-permute REPS=3 \
    ab permute deepseek-r1:1,2 llama4-scout:1,8,16 llama4-maverick:1,8,16 mixtral-8x7b:1,8
  echo "($SECONDS s)"
  } >> $log 2>&1
fi
{
SECONDS=0
echo "=== fused-combine v2: its GPU test"
timeout 60 gpubin/fc2/test_moe_gpu --gtest_filter='*FusedCombine*:*deepseek*w4a16*' 2>&1 | tail -4
echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/fc2/test_moe_gpu \
  --gtest_filter='*FusedCombine*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
FP4MOE_AB_HEAD_BIN=gpubin/fc2/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/fc2/fp4moe-bench \
  FP4MOE_AB_HEAD_ARGS=--fused-combine REPS=3 ab combine deepseek-r1:1,8,128 qwen3-30b-a3b:1,8
echo "($SECONDS s)"
echo "=== end"
} >> $log 2>&1
