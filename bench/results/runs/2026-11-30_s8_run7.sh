#!/usr/bin/env bash
# GPU run (session 8, run 7, the last ~5 minutes of device time): branch exp/s8-stages (BN80 with 9
# stages, BN96 with 8; gpubin/bin) against main (gpubin/base): test_moe_gpu, then an A/B at 57-80
# rows per expert.
set -u
o=$OUT; log=$o/a_run7.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu (all)"; SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -2 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60
} >> $log 2>&1
grep -q "=== exit 0" $log || exit 1
SECONDS=0
FP4MOE_AB_REPS=2 timeout 200 scripts/gpu-ab.sh deepseek-r1:2048,2304 qwen3-30b-a3b:1024 gpt-oss-120b:2048 >> $log 2>&1
echo "=== A/B exit $? ($SECONDS s)" >> $log
cd $o && tar czf ab.tgz ab && rm -rf ab
