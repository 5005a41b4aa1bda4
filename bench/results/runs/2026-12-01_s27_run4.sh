#!/usr/bin/env bash
# Session 27 run 4, on run 3's staging (gpubin with bound3, bound4). The bound experiments at decode:
# does a decode GEMM that reads its weights from L2 only (bound 4: the same copies, no DRAM) run
# faster than main? Sessions 19-21 concluded that the decode is bound by each SM's own rate, not by
# DRAM. (bound 4 moves the BN16 GEMM1 K loop 402 -> 408 SASS instructions; bound 3 copies a unit's
# weights once.)
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
specs="deepseek-r1:8,128 qwen3-30b-a3b:8 gpt-oss-120b:8"
for rep in 1 2; do
  for b in bin bound3 bound4; do
    for spec in $specs; do
      p=${spec%%:*}
      mkdir -p "$out/v_$b"
      timeout 120 gpubin/$b/fp4moe-bench --preset "$p" --tokens "${spec#*:}" --routing random --verbose \
        --json "$out/v_$b/head_${p}_$rep.json" > "$out/v_$b/head_${p}_$rep.log" 2>&1
      echo "=== $b $p rep $rep exit $?" >> "$log"
    done
  done
done
for b in bound3 bound4; do
  for f in "$out"/v_bin/head_*.json; do cp "$f" "$out/v_$b/base_${f##*/head_}"; done
  echo "--- $b" >> "$log"
  python3 bench/ab_summary.py "$out/v_$b" >> "$log" 2>&1
done
_gpu_step "variants" 0 $((SECONDS - s))
gpu_pack all
