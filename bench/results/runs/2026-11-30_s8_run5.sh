#!/usr/bin/env bash
# GPU run (session 8, run 5): what the 500 ms warm-up itself changes. One build (main), alternated with
# --warmup-ms 0 (base) and the default 500 (head), on one H200.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS="--warmup-ms 0" FP4MOE_AB_REPS=2 \
  timeout 250 scripts/gpu-ab.sh deepseek-r1:1,8,128,2048,8192 > $o/a_run5.txt 2>&1
echo "=== exit $?" >> $o/a_run5.txt
cd $o && tar czf ab.tgz ab && rm -rf ab
