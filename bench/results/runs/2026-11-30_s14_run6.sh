#!/usr/bin/env bash
# GPU run (session 14, run 6), on run 5's staging (main 8fc3029-era binaries; the probe is main's).
# ncu (no clock control) pipe utilizations of the probe's v2 decode: which pipe limits it now?
# decode alone, decode without the scale multiplies, full (N = 16), full at N = 80; 4 consumers.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
m='--metrics regex:sm__pipe_.*_cycles_active.avg.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg'
for spec in 1:16 12:16 0:16 0:80; do
  mode=${spec%%:*} n=${spec#*:}
  echo "### decode_loop<4, $mode, $n>" >> $o/ncu_pipes.txt
  timeout 90 ncu --clock-control none --kernel-name-base mangled -k "regex:decode_loopILi4ELi${mode}ELi${n}E" \
    --launch-skip 1 --launch-count 1 $m gpubin/bin/fp4moe-decode-probe --set layout --iters 2000 --reps 3 \
    >> $o/ncu_pipes.txt 2>&1
  echo "=== ncu $spec exit $?" >> $o/run.txt
done
