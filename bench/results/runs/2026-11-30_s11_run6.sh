#!/usr/bin/env bash
# GPU run (session 11, run 6; the last ~4 minutes of the session's device time). Staged on
# exp/finalize-early (cfa5d83) with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh:
# gpubin/bin = exp/finalize-early, gpubin/base = main a59d7e4.
# 1. test_moe_gpu of finalize-early  2. a short A/B against main (two repetitions)
set -u
o=$OUT; log=$o/a_run6.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
for z in gpubin/*/fp4moe-bench.gz; do if [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi; done
{
echo "=== test_moe_gpu (all, finalize-early)"; SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -40
if [ $rc = 0 ]; then
  SECONDS=0
  echo "=== A/B finalize-early (head) against main (base)"
  FP4MOE_AB_REPS=2 timeout 140 scripts/gpu-ab.sh deepseek-r1:1,8 qwen3-30b-a3b:1,8
  (cd $o && mv ab ab_finalize-early && tar czf ab_finalize-early.tgz ab_finalize-early && rm -rf ab_finalize-early)
  echo "($SECONDS s)"
fi
} >> $log 2>&1
