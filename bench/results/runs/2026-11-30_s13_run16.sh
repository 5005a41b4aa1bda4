#!/usr/bin/env bash
# GPU run (session 13, run 16). Staged on main with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
# The probe again after fixing the FMA-pipe decode's LOP3 table, with its bit check against decode_k16.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
timeout 120 gpubin/bin/fp4moe-decode-probe --iters 20000 --reps 5 > $o/run.txt 2>&1
echo "exit $?" >> $o/run.txt
