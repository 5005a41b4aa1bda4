#!/usr/bin/env bash
# GPU run (session 7, run 2): main with tail tiles. racecheck on the tail test, the README's
# DeepSeek-R1 table (--check) with the torch peers, and the per-kernel breakdown at T=2048/8192.
set -u
o=$OUT; log=$o/a_run2.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== racecheck tail test"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter='*Tail*' 2>&1 | \
  grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
echo "=== racecheck exit ${PIPESTATUS[0]}"
} >> $log 2>&1
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,1536,2048,4096,8192 timeout 330 scripts/gpu-check.sh deepseek-r1 >> $log 2>&1
FP4MOE_PROFILE_BREAKDOWN=1 timeout 100 scripts/gpu-profile.sh deepseek-r1 2048 8192 >> $log 2>&1
cd $o && tar czf a_prof.tgz breakdown_* && rm -f breakdown_* tests.log
echo "=== end" >> $log
