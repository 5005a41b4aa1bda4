#!/usr/bin/env bash
# GPU run (session 14, run 7; run 8 the same on the next commit, with mix-rs-nomul). Staged on main
# scripts/stage-gpu.sh. The probe's overlap set: decode warpgroups beside MMA warpgroups (RS or SS).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
timeout 100 gpubin/bin/fp4moe-decode-probe --set overlap --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
