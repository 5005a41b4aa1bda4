#!/usr/bin/env bash
# GPU run (session 7, run 9, short: the last 4 minutes of device time): branch exp/stmatrix-epilogue
# (gpubin/bin) against main (gpubin/base). sm90 GPU tests first, then a one-repetition A/B.
set -u
o=$OUT; log=$o/a_run9.txt
tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu (sm90)"
timeout 70 gpubin/bin/test_moe_gpu --gtest_filter='*sm90*:*EveryCompiled*:*Tail*:MoeGpu.*' > $o/t.txt 2>&1
rc=$?; tail -3 $o/t.txt; echo "=== exit $rc"
[ $rc != 0 ] && grep -B2 -A10 "Failure" $o/t.txt | head -40
} >> $log 2>&1
grep -q "=== exit 0" $log || exit 1
FP4MOE_AB_REPS=1 timeout 90 scripts/gpu-ab.sh deepseek-r1:8,2048,8192 qwen3-30b-a3b:128,16384 >> $log 2>&1
echo "=== end" >> $log
