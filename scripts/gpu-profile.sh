#!/usr/bin/env bash
# Nsight Compute on the sm90 GEMM kernels of one forward, per token count: speed of light, memory,
# warp stalls. Text reports land in $OUT/profile_<preset>_<T>.txt. Clocks are left alone.
# Usage: scripts/gpu-profile.sh PRESET T [T...]
set -u
out=${OUT:-/tmp/fp4moe-out}
bin=${FP4MOE_BIN:-gpubin}
preset=$1; shift
for T in "$@"; do
  rep="/tmp/prof_${preset}_${T}"
  timeout 300 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats -f -o "$rep" \
    "$bin/fp4moe-bench" --preset "$preset" --tokens "$T" --iters 1 --warmup 0 > /dev/null 2>&1
  ncu --import "$rep.ncu-rep" --page details > "$out/profile_${preset}_${T}.txt" 2>&1
  grep -E "moe_gemm|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Cache Throughput|Registers Per|Achieved Occupancy|Issued Warp|No Eligible" \
    "$out/profile_${preset}_${T}.txt" | sed 's/^ *//' | cut -c1-150
done
