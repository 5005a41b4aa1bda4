#!/usr/bin/env bash
# GPU run (session 6, run 6): exp/half-chunk (gpubin/bin) vs main 7a25662 (gpubin/base): correctness, then prefill A/B
set -u
o=$OUT; log=$o/a_run6.txt
tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu"; timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*sm90*:*EveryCompiled*:MoeGpu.*' 2>&1 | tail -3
if [ ${PIPESTATUS[0]} != 0 ]; then echo "=== tests failed, stop"; exit 1; fi
} >> $log 2>&1
grep -q "tests failed" $log && exit 1
FP4MOE_AB_REPS=2 timeout 170 scripts/gpu-ab.sh deepseek-r1:1536,2048,8192 qwen3-30b-a3b:1024,16384 >> $log 2>&1
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab
