#!/usr/bin/env bash
# GPU run (session 11, run 3). Staged on exp/fast-plan (7fc7a8d) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE_MORE="trmain=main" \
#   FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# gpubin/bin and gpubin/trace = exp/fast-plan, gpubin/base and gpubin/trmain (traced) = main a015779.
# 1. test_moe_gpu and test_routing_gpu of fast-plan; memcheck and racecheck on the plan and permute
# 2. kernel timelines of both (DeepSeek-R1 T=1,8; Qwen3-30B T=1)
# 3. A/B fast-plan against main
set -u
o=$OUT; log=$o/a_run3.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
for z in gpubin/*/fp4moe-bench.gz; do if [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi; done
export NCCL_NVLS_ENABLE=0
{
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
echo "=== test_moe_gpu + test_routing_gpu (all, fast-plan)"; SECONDS=0
timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
timeout 100 gpubin/bin/test_routing_gpu > $o/test_routing_gpu.txt 2>&1; rc2=$?
tail -3 $o/test_moe_gpu.txt; tail -2 $o/test_routing_gpu.txt; echo "=== exit $rc $rc2 ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60
[ $rc2 != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_routing_gpu.txt | head -30
} >> $log 2>&1
if [ "$rc" = 0 ] && [ "$rc2" = 0 ]; then
  {
  SECONDS=0
  echo "=== memcheck (plan, hostile routing, deepseek, overlap)"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Plan*:*HostileRouting*:*deepseek*:*GemmOverlap*:*OutOfRange*' 2>&1 \
    | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== racecheck (plan, hostile routing)"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Plan*:*HostileRouting*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"
  for b in trmain trace; do
    SECONDS=0
    echo "=== trace $b: deepseek-r1 T=1,8"
    timeout 90 gpubin/$b/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1,8 --verbose --trace \
      --json $o/trace_${b}_deepseek.json 2>&1 | tail -30
    echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
    echo "=== trace $b: qwen3-30b-a3b T=1"
    timeout 60 gpubin/$b/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1 --verbose --trace \
      --json $o/trace_${b}_qwen.json 2>&1 | tail -14
    echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
  done
  (cd $o && tar czf traces.tgz trace_*.json && rm trace_*.json)
  SECONDS=0
  echo "=== A/B fast-plan (head) against main (base)"
  FP4MOE_AB_REPS=3 timeout 260 scripts/gpu-ab.sh \
    deepseek-r1:1,8,128,2048 qwen3-30b-a3b:1,8 gpt-oss-120b:1 llama4-scout:1 mixtral-8x7b:1
  (cd $o && mv ab ab_fast-plan && tar czf ab_fast-plan.tgz ab_fast-plan && rm -rf ab_fast-plan)
  echo "($SECONDS s)"
  } >> $log 2>&1
fi
