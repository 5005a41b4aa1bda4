#!/usr/bin/env bash
# Session 27 run 3. Stage: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_VARIANTS="bound3=-DFP4MOE_BOUND_EXPERIMENT=3
#   bound4=-DFP4MOE_BOUND_EXPERIMENT=4 pf4=-DFP4MOE_L2_PREFETCH_CHUNKS=4 pf8=-DFP4MOE_L2_PREFETCH_CHUNKS=8
#   pf16=-DFP4MOE_L2_PREFETCH_CHUNKS=16" scripts/stage-gpu.sh  (that option existed at 2065769 only)
# Run 2 found the weights' copies costing the prefill 12-16% (bound 3: weights once a unit). Which part:
# bound 4 copies every stage's weights from one L2-resident place (the same requests, no DRAM);
# pfN prefetches the weights N chunks ahead of the copies into L2 (a candidate fix; it moves the BN80
# GEMM1 K loop 136 -> 149 SASS instructions, the prefill kernels only). nvidia-smi samples the SM
# clock and power meanwhile (the prefill runs at the power cap: DRAM reads cost clock?).
source scripts/gpu-lib.sh
gpu_init
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv,noheader -lms 100 > "$out/smi.csv" &
smi=$!
s=$SECONDS
specs="deepseek-r1:2048,8192 qwen3-30b-a3b:4096 gpt-oss-120b:2048"
for rep in 1 2; do
  for b in bin bound3 bound4 pf4 pf8 pf16; do
    for spec in $specs; do
      p=${spec%%:*}
      mkdir -p "$out/v_$b"
      echo "$(date +%H:%M:%S.%N) start $b $p $rep" >> "$out/times.txt"
      timeout 120 gpubin/$b/fp4moe-bench --preset "$p" --tokens "${spec#*:}" --routing random --verbose \
        --json "$out/v_$b/head_${p}_$rep.json" > "$out/v_$b/head_${p}_$rep.log" 2>&1
      echo "=== $b $p rep $rep exit $?" >> "$log"
      echo "$(date +%H:%M:%S.%N) end $b $p $rep" >> "$out/times.txt"
    done
  done
done
kill $smi
for b in bound3 bound4 pf4 pf8 pf16; do
  for f in "$out"/v_bin/head_*.json; do cp "$f" "$out/v_$b/base_${f##*/head_}"; done
  echo "--- $b" >> "$log"
  python3 bench/ab_summary.py "$out/v_$b" >> "$log" 2>&1
done
_gpu_step "variants" 0 $((SECONDS - s))
gpu_pack all
