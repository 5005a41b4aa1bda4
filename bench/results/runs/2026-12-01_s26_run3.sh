#!/usr/bin/env bash
# Session 26, run 3: main with the wide tiles' dynamic units (merged after run 2) under memcheck and
# racecheck of the tests that run wide tiles with skewed routing (tails, every token on the same
# experts); then Nsight Compute on the permute and the finalize (DeepSeek-R1 T = 2048 / 8192, both
# ~2 TB/s in session 26's traces), main's permute (a CTA per pair) and exp/s26-permute's (a CTA per
# token) side by side.
# Stage from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="perm=exp/s26-permute" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
GPU_SANITIZE_FILTER='*TailTilesGiveTheBits*:*EveryTokenOnTheSameExperts*' gpu_sanitize memcheck 120
GPU_SANITIZE_FILTER='*TailTilesGiveTheBits*:*EveryTokenOnTheSameExperts*' gpu_sanitize racecheck 200
for b in bin perm; do
  for T in 2048 8192; do
    s=$SECONDS
    timeout 120 ncu --clock-control none -k regex:'permute_kernel|finalize_kernel' --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      --section Occupancy --section LaunchStats --section WarpStateStats \
      gpubin/$b/fp4moe-bench --preset deepseek-r1 --iters 1 --warmup 0 --routing random --tokens $T \
      > "$out/ncu_${b}_$T.txt" 2>&1
    _gpu_step "ncu $b T=$T" $? $((SECONDS - s))
    grep -E "permute_kernel|finalize_kernel|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy" \
      "$out/ncu_${b}_$T.txt" | sed 's/^ *//' | cut -c1-120 >> "$log"
  done
done
gpu_pack all
