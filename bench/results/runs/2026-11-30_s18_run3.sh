#!/usr/bin/env bash
# GPU run (session 18, run 3), staged on main e36a87f with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
#   1. the trace build's per-tile phases at DeepSeek-R1 T = 8 / 32 / 128 and Qwen3-30B T=128
#   2. test_moe_gpu, then memcheck and racecheck over the default filter (plan step 0)
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
for spec in deepseek-r1:8,32,128 qwen3-30b-a3b:128; do
  SECONDS=0
  timeout 40 gpubin/trace/fp4moe-bench --preset ${spec%%:*} --tokens ${spec#*:} --routing random --verbose --trace \
    --json $o/trace_${spec%%:*}.json > $o/trace_${spec%%:*}.txt 2>&1
  echo "=== trace $spec exit $? ($SECONDS s)" >> $log
  grep -E "^ +[0-9]+ |gemm|cycles|path" $o/trace_${spec%%:*}.txt >> $log
done
SECONDS=0
timeout 100 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
echo "=== test_moe_gpu exit $? ($SECONDS s)" >> $log; tail -2 $o/test_moe_gpu.txt >> $log
filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
for tool in memcheck racecheck; do
  SECONDS=0
  echo "=== $tool on $filter" >> $log
  timeout 220 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
    > $o/$tool.txt 2>&1
  echo "=== $tool exit $? ($SECONDS s)" >> $log
  grep -E "SUMMARY|PASSED|FAILED|Error|hazard" $o/$tool.txt | head -10 >> $log
done
(cd $o && tar czf all.tgz trace_* test_moe_gpu.txt memcheck.txt racecheck.txt && rm -f trace_* test_moe_gpu.txt memcheck.txt racecheck.txt)
