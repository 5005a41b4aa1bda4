#!/usr/bin/env bash
# GPU run (session 14, run 1). Staged on main (FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh).
# 1. The tests (test_moe_gpu's set-up helper is back on main untested until now).
# 2. The probe's wide set: do the decode and the MMAs overlap at the prefill tiles' N (48-128),
#    with one fragment buffer (as BN64/80/96/128 run) and with two?
# 3. ncu (no clock control) of the real BN80 GEMMs at DeepSeek-R1 T=2048, for the same counters.
set -u
o=$OUT
FP4MOE_SECTIONS=tests bash scripts/gpu-check.sh > $o/tests.txt 2>&1
echo "=== tests exit $?" >> $o/run.txt
timeout 120 gpubin/bin/fp4moe-decode-probe --set wide --iters 20000 --reps 5 > $o/probe.txt 2>&1
echo "=== probe exit $?" >> $o/run.txt
secs="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled \
  -k 'regex:moe_gemm_sm90_kernelINS0_10Sm90TraitsILi80ELi4ELi9E' --launch-skip 8 --launch-count 2 \
  $secs gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 2048 --routing random --warmup-ms 0 > $o/ncu_bn80.txt 2>&1
echo "=== ncu bn80 exit $?" >> $o/run.txt
for m in 0 8; do  # full, full-1buf at N = 80, 4 warpgroups
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k "regex:decode_loopILi4ELi${m}ELi80E" --launch-skip 1 \
    --launch-count 1 $secs gpubin/bin/fp4moe-decode-probe --set wide --iters 2000 --reps 3 >> $o/ncu_probe80.txt 2>&1
  echo "=== ncu probe mode $m exit $?" >> $o/run.txt
done
