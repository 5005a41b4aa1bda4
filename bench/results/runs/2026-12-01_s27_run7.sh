#!/usr/bin/env bash
# Session 27 run 7: the plan's item 1 started (docs/perf-notes.md): Nsight Compute on the GEMMs of
# main and of a bound-4 build (the weights of every stage from one L2-resident place; timing only)
# at DeepSeek-R1 T = 128 / 2048, each kernel alone: duration, SM clock, DRAM and L2 throughput, L2
# hit rate, warp states. Where does the weights' DRAM stream cost the 13-16% that bound 4 removes?
# Stage: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_VARIANTS="bound4=-DFP4MOE_BOUND_EXPERIMENT=4" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
for b in bin bound4; do
  for T in 128 2048; do
    s=$SECONDS
    timeout 100 ncu --clock-control none -k regex:'moe_gemm_sm90_kernel' --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      gpubin/$b/fp4moe-bench --preset deepseek-r1 --iters 1 --warmup 0 --routing random --tokens $T \
      > "$out/ncu_${b}_$T.txt" 2>&1
    _gpu_step "ncu $b T=$T" $? $((SECONDS - s))
    grep -E "moe_gemm_sm90_kernel|Duration|SM Frequency|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Compute \(SM\)" \
      "$out/ncu_${b}_$T.txt" | sed 's/^ *//' | cut -c1-140 >> "$log"
  done
done
gpu_pack all
