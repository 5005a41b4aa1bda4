#!/usr/bin/env bash
# GPU run (session 15, run 1). Staged on exp/narrow-n2 (exp/narrow-n rebased onto main cf8b0e1) with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh. test_moe_gpu, memcheck and
# racecheck on the branch (its BN16 path is main's m64n8k16 code, which had no sanitizer run yet),
# then its A/B against main (3 repetitions) at decode and at the T where tiles are wide.
set -u
FP4MOE_TRY_AB_TIMEOUT=330 bash scripts/gpu-try.sh deepseek-r1:1,8,32,128,512,1024,2048,4096 \
  qwen3-30b-a3b:512,2048 gpt-oss-120b:2048
echo "=== gpu-try exit $?" >> $OUT/try.txt
