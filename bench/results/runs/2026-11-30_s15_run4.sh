#!/usr/bin/env bash
# GPU run (session 15, run 4): main 105dca3 (BN64 and BN96 narrowed too). test_moe_gpu, memcheck on
# the every-config and batch-invariance tests, an A/B against 9ca9064 (run 3's tables; 2
# repetitions) where BN64 and BN96 run, then fp4moe-decode-probe --set overlap again (run 2's
# repeat) and --set decode. Staged on main with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=9ca9064
# scripts/stage-gpu.sh.
set -u
o=$OUT; log=$o/run4.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
{
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -3
echo "=== test_moe_gpu exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
  --gtest_filter='*EveryCompiledSm90Config*:*OutputBitsDoNotDependOnTheBatch*' 2>&1 | grep -E "PASSED|FAILED|SUMMARY"
echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=2 timeout 200 bash scripts/gpu-ab.sh gpt-oss-120b:1536,2560 qwen3-235b-a22b:768,1280 \
  deepseek-r1:1536,2560 > $o/ab.txt 2>&1
echo "=== ab exit $? ($SECONDS s)"; SECONDS=0
sed -n '/^base .* vs head/,$p' $o/ab.txt
timeout 30 gpubin/bin/fp4moe-decode-probe --set overlap
echo "=== probe overlap exit $? ($SECONDS s)"; SECONDS=0
timeout 40 gpubin/bin/fp4moe-decode-probe --set decode
echo "=== probe decode exit $? ($SECONDS s)"
} >> $log 2>&1
tar -C $o -czf $o/ab.tgz ab && rm -rf $o/ab
