#!/usr/bin/env bash
# GPU run (session 14, run 4). Staged on main (the v2 layout, f0b7ec0-ish: the rot4/rot46 probe commit)
# with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="rot4=exp/decode-rot4 rot46=exp/decode-rot46"
# scripts/stage-gpu.sh.
# 1. The probe's layout set (main's): where the decode's shifts go (IMAD.SHL or SHF) and the
#    scale multiplies' cost. 2. A/B of each candidate kernel build against main, 3 repetitions.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
timeout 120 gpubin/bin/fp4moe-decode-probe --set layout --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
for v in rot4 rot46; do
  OUT=$o/$v FP4MOE_AB_REPS=3 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/$v/fp4moe-bench \
    timeout 250 bash scripts/gpu-ab.sh deepseek-r1:1,8,128,2048 qwen3-30b-a3b:8,2048 gpt-oss-120b:8 > $o/ab_$v.txt 2>&1
  echo "=== ab $v exit $?" >> $o/run.txt
  cp $o/$v/ab/summary.md $o/ab_summary_$v.md 2>/dev/null
done
tar -C $o -czf $o/ab.tgz rot4 rot46 && rm -rf $o/rot4 $o/rot46
