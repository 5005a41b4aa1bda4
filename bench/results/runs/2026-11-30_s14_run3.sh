#!/usr/bin/env bash
# GPU run (session 14, run 3). Staged on exp/decode-v2h with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# scripts/stage-gpu.sh (main = 8e330ac, the v2 layout), plus main's probe in gpubin/probe-main/.
# 1. main's probe, --set layout (run 2's probe stopped at its check: it was built on the branch,
#    whose decode_k16 was already v2). 2. A/B of v2h (the right shift as IMAD.HI) against main.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
timeout 120 gpubin/probe-main/fp4moe-decode-probe --set layout --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
FP4MOE_AB_REPS=3 timeout 400 bash scripts/gpu-ab.sh deepseek-r1:1,8,32,128,2048 qwen3-30b-a3b:8,128,2048 \
  gpt-oss-120b:8,128 > $o/ab.txt 2>&1
echo "=== ab exit $?" >> $o/run.txt
cp $o/ab/summary.md $o/ab_summary.md 2>/dev/null
tar -C $o -czf $o/ab.tgz ab && rm -rf $o/ab
