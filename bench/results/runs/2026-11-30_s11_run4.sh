#!/usr/bin/env bash
# GPU run (session 11, run 4). Staged on exp/plan-permute-small (8dafd21) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# gpubin/bin and gpubin/trace = exp/plan-permute-small, gpubin/base = main c6164cc (fast-plan merged).
# 1. test_moe_gpu of plan-permute-small; memcheck and racecheck on the plan, permute and small T
# 2. its kernel timeline (DeepSeek-R1 T=1,8; Qwen3-30B T=1)
# 3. A/B plan-permute-small against main
set -u
o=$OUT; log=$o/a_run4.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
for z in gpubin/*/fp4moe-bench.gz; do if [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi; done
export NCCL_NVLS_ENABLE=0
{
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
echo "=== test_moe_gpu (all, plan-permute-small)"; SECONDS=0
timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60
} >> $log 2>&1
if [ "$rc" = 0 ]; then
  {
  SECONDS=0
  echo "=== memcheck (plan, hostile routing, deepseek, overlap, shards, out of range)"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Plan*:*HostileRouting*:*deepseek*:*GemmOverlap*:*OutOfRange*:*ShardsSum*' 2>&1 \
    | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== racecheck (plan, hostile routing, deepseek)"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*Plan*:*HostileRouting*:*deepseek*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== trace: deepseek-r1 T=1,8"
  timeout 90 gpubin/trace/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1,8 --verbose --trace \
    --json $o/trace_deepseek.json 2>&1 | tail -22
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== trace: qwen3-30b-a3b T=1"
  timeout 60 gpubin/trace/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1 --verbose --trace \
    --json $o/trace_qwen.json 2>&1 | tail -12
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
  (cd $o && tar czf traces.tgz trace_*.json && rm trace_*.json)
  SECONDS=0
  echo "=== A/B plan-permute-small (head) against main (base)"
  FP4MOE_AB_REPS=3 timeout 280 scripts/gpu-ab.sh \
    deepseek-r1:1,2,8 qwen3-30b-a3b:1,8 gpt-oss-120b:1,8 llama4-scout:1,8 mixtral-8x7b:1,8
  (cd $o && mv ab ab_plan-permute-small && tar czf ab_plan-permute-small.tgz ab_plan-permute-small && rm -rf ab_plan-permute-small)
  echo "($SECONDS s)"
  } >> $log 2>&1
fi
