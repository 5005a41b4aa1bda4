#!/usr/bin/env bash
# one-off GPU run (session 6, run 1): exp/gemm-overlap (gpubin/bin) vs main (gpubin/base), exp/two-ctas (gpubin/two)
set -u
o=$OUT; log=$o/a_run1.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for t in test_moe_gpu test_pipeline_probe_gpu test_routing_gpu; do
  echo "=== $t"; timeout 120 gpubin/bin/$t 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -12; echo "=== $t exit ${PIPESTATUS[0]}"
done
echo "=== base --check"; timeout 120 gpubin/base/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1,8,128,2048 --check 2>&1 | tail -8
echo "=== head --check qwen3-30b"; timeout 120 gpubin/bin/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1,8,128,1024 --check 2>&1 | tail -7
} >> $log 2>&1
FP4MOE_AB_REPS=2 timeout 300 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,512 qwen3-30b-a3b:1,8,128 gpt-oss-120b:1,8,128 >> $log 2>&1
{
echo "=== two-ctas tune"
timeout 90 gpubin/two/fp4moe-bench --preset deepseek-r1 --routing random --tokens 2048,8192 --tune /tmp/t1.txt 2>&1 | grep -vE '^ *$' | head -12
timeout 60 gpubin/two/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1024,4096 --tune /tmp/t2.txt 2>&1 | head -8
echo "=== memcheck head"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter='*deepseek*w4a16*:*EveryCompiled*:*SplitK*:*Hostile*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" | tail -5
echo "=== memcheck exit ${PIPESTATUS[0]}"
echo "=== racecheck head"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter='*deepseek_r1_w4a16_sm90*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | head -30
echo "=== racecheck exit ${PIPESTATUS[0]}"
} >> $log 2>&1
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab
