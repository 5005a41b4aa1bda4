#!/usr/bin/env bash
# GPU run (session 9, run 1). gpubin/bin = exp/overlap-gated (rebased on main d87739b, so it also
# carries main's plan visitor), gpubin/base = main, gpubin/lds = exp/lds-ahead (rebased on main).
# Part A: every test_moe_gpu test (covers the plan visitor and the overlap test), memcheck and
# racecheck on the overlap and plan tests, then the lds-ahead A/B.
# Part B (FP4MOE_RUN_PART=B): one build with and without --no-gemm-overlap.
set -u
o=$OUT; part=${FP4MOE_RUN_PART:-A}; log=$o/a_run1$part.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
ab() {  # name head_bin specs...
  local name=$1 head=$2; shift 2
  echo "=== A/B $name: $head against ${FP4MOE_AB_BASE_BIN:-gpubin/base/fp4moe-bench} ${FP4MOE_AB_BASE_ARGS:-}"
  FP4MOE_AB_HEAD_BIN=$head FP4MOE_AB_REPS=${REPS:-2} timeout 400 scripts/gpu-ab.sh "$@"
  (cd $o && mv ab ab_$name && tar czf ab_$name.tgz ab_$name && rm -rf ab_$name)
}
if [ $part = A ]; then
  {
  echo "=== test_moe_gpu (all)"; SECONDS=0
  timeout 240 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
  tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
  [ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -80
  } >> $log 2>&1
  grep -q "=== exit 0" $log || exit 1
  {
  echo "=== memcheck (overlap, plan)"; SECONDS=0
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*GemmOverlap*:*Plan*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== racecheck (overlap)"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*GemmOverlap*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"
  SECONDS=0; ab lds gpubin/lds/fp4moe-bench deepseek-r1:8,128,512 qwen3-30b-a3b:8,128; echo "($SECONDS s)"
  echo "=== end"
  } >> $log 2>&1
else
  {
  SECONDS=0
  FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-gemm-overlap REPS=3 \
    ab overlap gpubin/bin/fp4moe-bench deepseek-r1:1,6 qwen3-30b-a3b:1,8 gpt-oss-120b:1,8 llama4-scout:1,8
  echo "($SECONDS s)"
  echo "=== end"
  } >> $log 2>&1
fi
