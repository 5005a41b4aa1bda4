#!/usr/bin/env bash
# GPU run (session 12, run 6): final main 0c97d73 (run 5's code plus a test refactor): every
# test_moe_gpu test, memcheck over all of them, racecheck on the direct-GEMM1 and batch tests.
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh on main.
set -u
o=$OUT; log=$o/a_run6.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
  SECONDS=0; timeout 60 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
  echo "=== test_moe_gpu exit $? ($SECONDS s)"; tail -3 $o/test_moe_gpu.txt
  SECONDS=0; timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu 2>&1 | tail -2
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"
  SECONDS=0; timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Direct*:*Batch*' 2>&1 | tail -2
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $log 2>&1
