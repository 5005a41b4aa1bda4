#!/usr/bin/env bash
# GPU run (session 12, run 7): main after the final review's refactor of the plan's helpers
# (plan_permute_kernel's SASS changed by a few address instructions): every test_moe_gpu test,
# memcheck over the plan, direct-GEMM1, hostile-routing and batch tests.
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh on main.
set -u
o=$OUT; log=$o/a_run7.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
  SECONDS=0; timeout 60 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
  echo "=== test_moe_gpu exit $? ($SECONDS s)"; grep -E "PASSED|FAILED" $o/test_moe_gpu.txt | tail -3
  SECONDS=0; timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Plan*:*Direct*:*HostileRouting*:*Batch*' 2>&1 | tail -2
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $log 2>&1
