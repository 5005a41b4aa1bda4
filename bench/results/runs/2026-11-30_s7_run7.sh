#!/usr/bin/env bash
# GPU run (session 7, run 7): main (find_tile from shared memory) against 35d1268 (gpubin/base):
# GPU tests and memcheck (stop on a failure), the A/B, then the README's DeepSeek-R1 table on main
# (--check, torch peers in the same run).
set -u
o=$OUT; log=$o/a_run7.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu"; timeout 150 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
if [ $? != 0 ]; then echo "=== tests failed, stop"; grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60; fi
tail -3 $o/test_moe_gpu.txt
} >> $log 2>&1
grep -q "tests failed" $log && exit 1
echo "=== memcheck" >> $log
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 gpubin/bin/test_moe_gpu \
  --gtest_filter='*deepseek_r1_w4a16_sm90*:*Hostile*sm90*:*Tail*:*EveryCompiled*' 2>&1 | grep -E "SUMMARY|PASSED|FAILED" >> $log
FP4MOE_AB_REPS=2 timeout 170 scripts/gpu-ab.sh deepseek-r1:1,8,128,2048,8192 qwen3-30b-a3b:128,16384 gpt-oss-120b:128 >> $log 2>&1
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab; cd - >/dev/null
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,1536,2048,4096,8192 timeout 170 scripts/gpu-check.sh deepseek-r1 >> $log 2>&1
rm -f $o/tests.log
echo "=== end" >> $log
