#!/usr/bin/env bash
# GPU run (session 13, run 3), on run 2's staging: each change alone against main. Written but never
# run: run 2 showed both changes within noise, and run 7 measured the co-resident plan alone.
set -u
o=$OUT
for pair in il:deepseek-r1:8,128,2048 pc:deepseek-r1:1 il:qwen3-30b-a3b:8,128 pc:qwen3-30b-a3b:1 pc:gpt-oss-120b:1; do
  name=${pair%%:*} spec=${pair#*:}
  SECONDS=0
  echo "=== A/B $name against main: $spec" >> $o/try.txt
  FP4MOE_AB_REPS=3 FP4MOE_AB_HEAD_BIN=gpubin/$name/fp4moe-bench OUT=$o/$name-${spec%%:*} timeout 150 scripts/gpu-ab.sh $spec \
    > $o/ab_$name-${spec%%:*}.txt 2>&1
  echo "exit $? ($SECONDS s)" >> $o/try.txt
  sed -n '/^base .* vs head/,$p' $o/ab_$name-${spec%%:*}.txt >> $o/try.txt
done
(cd $o && tar czf ab3.tgz il-* pc-* ab_*.txt && rm -rf il-* pc-* ab_*.txt)
