#!/usr/bin/env bash
# GPU run (session 7, run 6): main (row_weight written by the permute, epilogue prefetch, batched plan ids) against 20df7db (gpubin/base).
# Tests and memcheck first (stop on a failure), then the A/B and the per-kernel breakdown at T=2048/8192.
set -u
o=$OUT; log=$o/a_run6.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu"; timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
if [ $? != 0 ]; then echo "=== tests failed, stop"; grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60; fi
tail -3 $o/test_moe_gpu.txt
} >> $log 2>&1
grep -q "tests failed" $log && exit 1
for t in test_routing_gpu test_format_gpu; do timeout 100 gpubin/bin/$t 2>&1 | tail -1 | sed "s/^/$t: /" >> $log; done
echo "=== memcheck" >> $log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 gpubin/bin/test_moe_gpu \
  --gtest_filter='*deepseek_r1_w4a16_sm90*:*gpt_oss_20b*sm90*:*Hostile*sm90*:*Tail*:*OutOfRange*' 2>&1 | grep -E "SUMMARY|PASSED|FAILED" >> $log
FP4MOE_AB_REPS=2 timeout 250 scripts/gpu-ab.sh deepseek-r1:1,8,128,2048,8192 qwen3-30b-a3b:128,16384 gpt-oss-120b:128,16384 >> $log 2>&1
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab; cd - >/dev/null
FP4MOE_PROFILE_BREAKDOWN=1 timeout 80 scripts/gpu-profile.sh deepseek-r1 8192 >> $log 2>&1
cd $o && tar czf a_prof.tgz breakdown_* stalls_* 2>/dev/null && rm -f breakdown_* stalls_*
echo "=== end" >> $log
