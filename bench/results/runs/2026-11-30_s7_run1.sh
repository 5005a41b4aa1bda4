#!/usr/bin/env bash
# GPU run (session 7, run 1): tail tiles. Correctness (GPU tests, memcheck on the tail test), then an
# A/B of one build with and without --no-tail-tiles, then ncu metrics of prefill GEMMs.
set -u
o=$OUT; log=$o/a_run1.txt
tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
{
echo "=== test_moe_gpu"; timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
if [ $? != 0 ]; then echo "=== tests failed, stop"; grep -B3 -A12 "Failure\|FAILED\|rror" $o/test_moe_gpu.txt | head -80; fi
tail -4 $o/test_moe_gpu.txt
} >> $log 2>&1
grep -q "tests failed" $log && exit 1
echo "=== memcheck tail test" >> $log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 gpubin/bin/test_moe_gpu --gtest_filter='*Tail*' 2>&1 | tail -4 >> $log
FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-tail-tiles FP4MOE_AB_REPS=2 \
  timeout 260 scripts/gpu-ab.sh deepseek-r1:3072,4096,8192 llama4-maverick:16384 gpt-oss-120b:8192,16384 >> $log 2>&1
gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 8192 --verbose 2>&1 | grep -i "gemm\|tail" | head -5 >> $log
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab; cd - >/dev/null
FP4MOE_PROFILE_METRICS=1 timeout 150 scripts/gpu-profile.sh deepseek-r1 2048 8192 >> $log 2>&1
echo "=== end" >> $log
