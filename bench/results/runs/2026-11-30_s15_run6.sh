#!/usr/bin/env bash
# GPU run (session 15, run 6): exp/overlap-rounds8 (0f10ec4: the GEMM1/GEMM2 overlap up to 8
# expected GEMM1 rounds instead of 5.5) against main (the kernels of 105dca3), 3 repetitions, at the
# points it turns the overlap on: DeepSeek-R1 T=8 (6.8 rounds), Mixtral T = 8 / 16 (6.8),
# Llama-4-Maverick T=16 (7.3). Staged on main with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_MORE="ov8=exp/overlap-rounds8" scripts/stage-gpu.sh.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/ov8/fp4moe-bench \
  timeout 150 bash scripts/gpu-ab.sh deepseek-r1:8 mixtral-8x7b:8,16 llama4-maverick:16 > $o/ab.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $o/ab.txt
tar -C $o -czf $o/ab.tgz ab && rm -rf $o/ab
