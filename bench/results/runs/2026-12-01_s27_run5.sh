#!/usr/bin/env bash
# Session 27 run 5. Stage: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_VARIANTS="pfw8=-DFP4MOE_L2_PREFETCH_WARP=8
#   pfw16=-DFP4MOE_L2_PREFETCH_WARP=16 pfw32=-DFP4MOE_L2_PREFETCH_WARP=32" scripts/stage-gpu.sh
# Run 4: the decode reading its weights from L2 only (bound 4) was 13-16% faster at DeepSeek-R1 T =
# 8 / 128, so DRAM latency, not only the SM's own rate, limits it; run 3: a bulk L2 prefetch (a TMA
# request too) gained nothing. pfwN: the static-schedule kernels' producer warpgroup's warp 2
# prefetches each chunk's weights into L2 by prefetch.global.L2 (the load/store path), up to N chunks
# ahead of the producer's copies (the decode GEMM1, GEMM2 at BN32, the tails; not the dynamic ones).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
timeout 60 gpubin/pfw16/fp4moe-bench --preset deepseek-r1 --tokens 1,8,128,512 --routing random --check \
  > "$out/pfw16_check.txt" 2>&1
echo "=== pfw16 --check exit $?" >> "$log"; grep -E '^ +[0-9]+ ' "$out/pfw16_check.txt" >> "$log"
specs="deepseek-r1:8,128,512 qwen3-30b-a3b:8 gpt-oss-120b:8"
for rep in 1 2; do
  for b in bin pfw8 pfw16 pfw32; do
    for spec in $specs; do
      p=${spec%%:*}
      mkdir -p "$out/v_$b"
      timeout 120 gpubin/$b/fp4moe-bench --preset "$p" --tokens "${spec#*:}" --routing random --verbose \
        --json "$out/v_$b/head_${p}_$rep.json" > "$out/v_$b/head_${p}_$rep.log" 2>&1
      echo "=== $b $p rep $rep exit $?" >> "$log"
    done
  done
done
for b in pfw8 pfw16 pfw32; do
  for f in "$out"/v_bin/head_*.json; do cp "$f" "$out/v_$b/base_${f##*/head_}"; done
  echo "--- $b" >> "$log"
  python3 bench/ab_summary.py "$out/v_$b" >> "$log" 2>&1
done
_gpu_step "variants" 0 $((SECONDS - s))
gpu_pack all
