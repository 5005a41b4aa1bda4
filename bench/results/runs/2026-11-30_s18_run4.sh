#!/usr/bin/env bash
# GPU run (session 18, run 4). Staged on exp/fast-find with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
#   1. test_moe_gpu of exp/fast-find (32-bit tile arithmetic with FastDiv, GEMM1's shared tables)
#   2. its trace at DeepSeek-R1 T = 8 / 32 / 128 (cycles per tile finding it)
#   3. A/B main against it (3 repetitions, graph replay)
#   4. memcheck and racecheck over the default filter
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
timeout 100 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
rc=$?
echo "=== test_moe_gpu exit $rc ($SECONDS s)" >> $log; tail -2 $o/test_moe_gpu.txt >> $log
grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -40 >> $log
if [ $rc = 0 ]; then
  SECONDS=0
  timeout 40 gpubin/trace/fp4moe-bench --preset deepseek-r1 --tokens 8,32,128 --routing random --verbose --trace \
    --json $o/trace_deepseek.json > $o/trace_log.txt 2>&1
  echo "=== trace exit $? ($SECONDS s)" >> $log
  grep -E "^ +[0-9]+ |gemm|cycles" $o/trace_log.txt >> $log
  SECONDS=0
  OUT=$o/ab FP4MOE_AB_REPS=3 timeout 200 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,2048 gpt-oss-120b:1,8,128 \
    qwen3-30b-a3b:1,8,128 llama4-scout:1,2 > $o/ab_log.txt 2>&1
  echo "=== ab fast-find exit $? ($SECONDS s)" >> $log
  cat $o/ab/ab/summary.md >> $log 2>/dev/null
  filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
  for tool in memcheck racecheck; do
    SECONDS=0
    echo "=== $tool on $filter" >> $log
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
      > $o/$tool.txt 2>&1
    echo "=== $tool exit $? ($SECONDS s)" >> $log
    grep -E "SUMMARY|PASSED|FAILED|Error|hazard" $o/$tool.txt | head -10 >> $log
  done
fi
(cd $o && tar czf all.tgz ab ab_log.txt trace_* test_moe_gpu.txt memcheck.txt racecheck.txt 2>/dev/null;
  rm -rf ab ab_log.txt trace_* test_moe_gpu.txt memcheck.txt racecheck.txt)
