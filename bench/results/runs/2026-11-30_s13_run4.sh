#!/usr/bin/env bash
# GPU run (session 13, run 4). Staged on main with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
# fp4moe-decode-probe with its pipeline probe (memory through the stages, with and without the decode).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $o/run.txt 2>&1
SECONDS=0
timeout 200 gpubin/bin/fp4moe-decode-probe --iters 20000 --reps 7 >> $o/run.txt 2>&1
echo "=== probe exit $? ($SECONDS s)" >> $o/run.txt
