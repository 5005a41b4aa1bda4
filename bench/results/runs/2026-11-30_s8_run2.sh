#!/usr/bin/env bash
# GPU run (session 8, run 2): the decode's rotations on the FMA pipe (IMAD.SHL / IMAD.WIDE instead of
# SHF; gpubin/bin = main) against 4fe8798 (gpubin/base: the same fp4moe-bench, the SHF decode).
# test_moe_gpu first, then the A/B, then DeepSeek-R1's sweep and the torch peers with the new
# sustained bf16 ceiling and 500 ms warm-ups.
set -u
o=$OUT; log=$o/a_run2.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
{
echo "=== test_moe_gpu (all)"; SECONDS=0
timeout 240 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -2 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -80
timeout 60 gpubin/bin/test_layout 2>&1 | tail -1
} >> $log 2>&1
grep -q "=== exit 0" $log || exit 1
{
SECONDS=0
FP4MOE_AB_REPS=2 timeout 330 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,2048 qwen3-30b-a3b:8,128 gpt-oss-120b:8,128
echo "(A/B $SECONDS s)"
(cd $o && tar czf ab.tgz ab && rm -rf ab)
SECONDS=0
FP4MOE_SECTIONS="bench peers" timeout 200 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"
echo "=== end"
} >> $log 2>&1
