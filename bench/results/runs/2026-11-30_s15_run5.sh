#!/usr/bin/env bash
# GPU run (session 15, run 5): main (the kernels of 105dca3). Where DeepSeek-R1 decode's time goes
# now that its K loop is faster than the copy floor in the probe (N = 8: 101 cycles a unit, 5.33 TB/s
# at 1.77 GHz without memory): fp4moe-decode-probe --set pipeline (the loop streaming from memory,
# N = 16 and 8), then the traced build's kernel timeline at DeepSeek-R1 T = 8, 32, 128. Staged on
# main with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh.
set -u
o=$OUT; log=$o/run5.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
{
SECONDS=0
timeout 60 gpubin/bin/fp4moe-decode-probe --set pipeline
echo "=== probe pipeline exit $? ($SECONDS s)"; SECONDS=0
timeout 100 gpubin/trace/fp4moe-bench --preset deepseek-r1 --tokens 8,32,128 --routing random --verbose --trace \
  --json $o/trace_deepseek-r1.json 2>&1 | tail -n 80
echo "=== trace exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $log 2>&1
