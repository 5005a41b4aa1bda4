#!/usr/bin/env bash
# one-off GPU run (session 6, run 3): exp/bn80 = every-lane stage release + BN80/BN112 candidates (gpubin/bin) vs main (gpubin/base)
set -u
o=$OUT; log=$o/a_run3.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
echo "=== first"; timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*deepseek_r1_w4a16_sm90*:*EveryCompiled*' 2>&1 | tail -3
if [ ${PIPESTATUS[0]} != 0 ]; then echo "=== first failed, stop"; exit 1; fi
for t in test_moe_gpu test_pipeline_probe_gpu; do
  echo "=== $t"; timeout 120 gpubin/bin/$t 2>&1 | grep -vE '^\[ +(RUN|OK) +\]|Skipped|SKIPPED|NVFP4-only|cpp:102' | tail -6; echo "=== $t exit ${PIPESTATUS[0]}"
done
for f in ConsumerSeesEveryChunk ConsumerSeesEveryChunkWithProxyFence ConsumerSeesEveryChunkEveryLaneReleases; do
  echo "=== racecheck probe $f"
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_pipeline_probe_gpu --gtest_filter="PipelineProbe.$f" 2>&1 | grep -E "Race|RACECHECK SUMMARY|PASSED|FAILED" | head -6
  echo "=== racecheck probe exit ${PIPESTATUS[0]}"
done
for f in '*deepseek_r1_w4a16_sm90*' '*EveryCompiled*' '*Hostile*sm90*'; do
  echo "=== racecheck test_moe_gpu $f"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$f" 2>&1 | grep -E "Race|hazard|RACECHECK SUMMARY|PASSED|FAILED" | head -12
  echo "=== racecheck exit ${PIPESTATUS[0]}"
done
echo "=== memcheck head"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter='*deepseek*w4a16*:*EveryCompiled*:*SplitK*:*Hostile*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" | tail -5
echo "=== memcheck exit ${PIPESTATUS[0]}"
} >> $log 2>&1
grep -q "first failed" $log && exit 1
FP4MOE_AB_REPS=2 timeout 240 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,512,2048,8192 qwen3-30b-a3b:1,8,128,1024 gpt-oss-120b:1,8,128 >> $log 2>&1
{
echo "=== tune"
timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1536,2048,2560,3072,8192 --tune /tmp/t1.txt 2>&1 | grep -E "^ +[0-9]+ +BN"
timeout 30 gpubin/bin/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 768,1024,1536,16384 --tune /tmp/t2.txt 2>&1 | grep -E "^ +[0-9]+ +BN"
timeout 30 gpubin/bin/fp4moe-bench --preset gpt-oss-120b --routing random --tokens 2048,3072 --tune /tmp/t3.txt 2>&1 | grep -E "^ +[0-9]+ +BN"
} >> $log 2>&1
cd $o && tar czf a_ab.tgz ab 2>/dev/null; rm -rf ab
