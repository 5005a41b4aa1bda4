#!/usr/bin/env bash
# GPU run (session 14, run 2). Staged on exp/decode-v2 with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# scripts/stage-gpu.sh (main = the probe's v2 commit).
# 1. The tests on the v2 decode layout. 2. The probe's v2 set (decode layouts, no-multiply timing).
# 3. A/B of the v2 layout (head) against main (base), 3 repetitions.
set -u
o=$OUT
FP4MOE_SECTIONS=tests bash scripts/gpu-check.sh > $o/tests.txt 2>&1
echo "=== tests exit $?" >> $o/run.txt
timeout 120 gpubin/bin/fp4moe-decode-probe --set v2 --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
FP4MOE_AB_REPS=3 timeout 420 bash scripts/gpu-ab.sh deepseek-r1:1,8,32,128,2048,8192 qwen3-30b-a3b:8,128,2048 \
  gpt-oss-120b:8,128 > $o/ab.txt 2>&1
echo "=== ab exit $?" >> $o/run.txt
cp $o/ab/summary.md $o/ab_summary.md 2>/dev/null
tar -C $o -czf $o/ab.tgz ab && rm -rf $o/ab
