#!/usr/bin/env bash
# GPU run (session 13, run 12). Staged on main with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="noepi=exp/no-epilogue-timing" scripts/stage-gpu.sh
# What a tile's epilogue costs at decode: main against a build whose GEMMs skip it (wrong outputs,
# the same K-loop SASS), DeepSeek-R1 at T = 8, 32, 128 (no GEMM overlap there).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
FP4MOE_AB_REPS=2 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/noepi/fp4moe-bench \
  OUT=$o timeout 200 scripts/gpu-ab.sh deepseek-r1:8,32,128 > $o/ab.txt 2>&1
echo "exit $?" >> $o/ab.txt
