#!/usr/bin/env bash
# GPU run (session 14, run 7). Staged on main (the mix-rs/mix-ss probe commit) with FP4MOE_STAGE_PYTHON=0
# scripts/stage-gpu.sh. The probe's overlap set: decode warpgroups beside MMA warpgroups (RS or SS).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
timeout 100 gpubin/bin/fp4moe-decode-probe --set overlap --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
