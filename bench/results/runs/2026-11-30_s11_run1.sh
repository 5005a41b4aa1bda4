#!/usr/bin/env bash
# (As run: the gunzip line lacked the chmod, so the traces and the A/B found no executable; the
# tests, memcheck and racecheck ran. Run 2 repeats the rest.)
# GPU run (session 11, run 1). Staged with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="sk=exp/split-k-range" \
#   FP4MOE_STAGE_TRACE_MORE="trmain=main" FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# on exp/weights-first: gpubin/bin and gpubin/trace = exp/weights-first, gpubin/base = main,
# gpubin/trmain = main with -DFP4MOE_TRACE=ON, gpubin/sk = exp/split-k-range.
# 1. the first kernel timelines (main, then weights-first): DeepSeek-R1 T=1,8, Qwen3-30B T=1
# 2. every test_moe_gpu test of weights-first; memcheck and racecheck on the paths it touches
# 3. A/B weights-first against main
set -u
o=$OUT; log=$o/a_run1.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
for z in gpubin/*/fp4moe-bench.gz; do if [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi; done
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
{
for b in trmain trace; do
  echo "=== trace $b: deepseek-r1 T=1,8"; SECONDS=0
  timeout 90 gpubin/$b/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1,8 --verbose --trace \
    --json $o/trace_${b}_deepseek.json 2>&1 | tail -60
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== trace $b: qwen3-30b-a3b T=1"
  timeout 60 gpubin/$b/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1 --verbose --trace \
    --json $o/trace_${b}_qwen.json 2>&1 | tail -30
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
done
echo "=== test_moe_gpu (all, weights-first)"; SECONDS=0
timeout 200 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
[ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -60
} >> $log 2>&1
if [ "$rc" = 0 ]; then
  {
  SECONDS=0
  echo "=== memcheck (overlap, split-K, deepseek, every config)"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*GemmOverlap*:*SplitK*:*deepseek*:*EveryCompiledSm90Config*' 2>&1 \
    | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== racecheck (overlap, split-K)"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*GemmOverlap*:*SplitK*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== A/B weights-first (head) against main (base)"
  FP4MOE_AB_REPS=3 timeout 240 scripts/gpu-ab.sh \
    deepseek-r1:1,8,128 qwen3-30b-a3b:1,8 gpt-oss-120b:1,8 llama4-scout:8
  (cd $o && mv ab ab_weights-first && tar czf ab_weights-first.tgz ab_weights-first && rm -rf ab_weights-first)
  echo "($SECONDS s)"
  } >> $log 2>&1
fi
