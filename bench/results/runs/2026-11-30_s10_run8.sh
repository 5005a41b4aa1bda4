#!/usr/bin/env bash
# GPU run (session 10, run 8): main with split-K at >= 3 ranges. Its GPU tests, then --split-k
# against the default in one build at the points of run 7 where it split.
set -u
o=$OUT; log=$o/a_run8.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*SplitK*:*EveryCompiled*' 2>&1 | tail -3
echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
} > $log 2>&1
if grep -q "=== exit 0" $log; then
  FP4MOE_AB_HEAD_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
    FP4MOE_AB_HEAD_ARGS="--split-k --verbose" FP4MOE_AB_REPS=2 timeout 200 scripts/gpu-ab.sh \
    llama4-scout:1,2 mixtral-8x7b:1 qwen3-30b-a3b:1 gpt-oss-120b:1 >> $log 2>&1
  echo "($SECONDS s)" >> $log
  for f in $o/ab/head_*_1.log; do echo "== $f"; grep "path" $f; done >> $log
  rm -rf $o/ab
fi
