#!/usr/bin/env bash
# GPU run (session 14, run 9). Staged on exp/bn16-small8 with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# scripts/stage-gpu.sh. test_moe_gpu on the branch, then its A/B against main (2 repetitions).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -15 > $o/tests.txt
echo "=== test_moe_gpu exit ${PIPESTATUS[0]}" >> $o/run.txt
FP4MOE_AB_REPS=2 timeout 150 bash scripts/gpu-ab.sh deepseek-r1:1,8,32,128 qwen3-30b-a3b:8 gpt-oss-120b:8 > $o/ab.txt 2>&1
echo "=== ab exit $?" >> $o/run.txt
cp $o/ab/summary.md $o/ab_summary.md 2>/dev/null
tar -C $o -czf $o/ab.tgz ab && rm -rf $o/ab
