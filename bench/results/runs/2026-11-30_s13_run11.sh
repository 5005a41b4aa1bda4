#!/usr/bin/env bash
# GPU run (session 13, run 11), on run 10's staging: 3daaff3 on exp/dyn-gemm2-wide (FP4MOE_STAGE_PYTHON=0
# scripts/stage-gpu.sh), so its GEMM1 ran with the overlap (the gate at 40 rounds).
# ncu without clock control, side by side: the real BN16 GEMM1 at DeepSeek-R1 T=8 and the pipeline
# probe's long stream with decode and MMAs (same stages, same K loop minus the tile logic).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
secs="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
timeout 150 ncu --clock-control none --kernel-name-base mangled \
  -k 'regex:moe_gemm_sm90_kernelINS0_10Sm90TraitsILi16ELi4ELi6ELi1ELb1ELb1ELi2EEELb0E' --launch-skip 20 --launch-count 1 \
  $secs gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 8 --routing random --warmup-ms 0 > $o/ncu_gemm1_T8.txt 2>&1
echo "=== ncu gemm1 exit $?" >> $o/run.txt
timeout 120 ncu --clock-control none --kernel-name-base mangled -k 'regex:stream_loopILi4ELi6ELb1E' --launch-skip 3 \
  --launch-count 1 $secs gpubin/bin/fp4moe-decode-probe --iters 2000 --reps 1 > $o/ncu_stream.txt 2>&1
echo "=== ncu stream exit $?" >> $o/run.txt
