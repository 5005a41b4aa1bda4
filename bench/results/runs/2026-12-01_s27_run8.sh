#!/usr/bin/env bash
# Session 27 run 8, on run 7's staging (bin = main 9a12631, bound4). Run 7's ncu had the decode
# GEMMs alone within 2-6% of bound 4 (GEMM1 at 4.17 TB/s), while in graph replay bound 4 was 13-16%
# faster (runs 4): the loss is in the layer, not in a kernel alone. Graph-replay times with the SM
# clock and power (--clocks), with and without the GEMM1/GEMM2 overlap, main and bound 4.
source scripts/gpu-lib.sh
gpu_init
for b in bin bound4; do
  for extra in "" "--no-gemm-overlap"; do
    s=$SECONDS
    timeout 60 gpubin/$b/fp4moe-bench --preset deepseek-r1 --tokens 8,128 --routing random --clocks --verbose \
      $extra --json "$out/${b}${extra:+_nooverlap}.json" > "$out/${b}${extra:+_nooverlap}.txt" 2>&1
    _gpu_step "$b $extra" $? $((SECONDS - s))
    grep -E '^ +[0-9]+ |clock|MHz|W ' "$out/${b}${extra:+_nooverlap}.txt" | cut -c1-160 >> "$log"
  done
done
gpu_pack all
