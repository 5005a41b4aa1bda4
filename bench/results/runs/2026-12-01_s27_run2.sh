#!/usr/bin/env bash
# Session 27 run 2. Stage: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=8bf14b5 FP4MOE_STAGE_BOUND="1 2 3" scripts/stage-gpu.sh
# (bin: c4a0a56, the ranged wide tiles' float4 loads; base: 8bf14b5, without them; boundN: the bound
# experiments of CMakeLists.txt, timing only.)
# 1. test_moe_gpu on c4a0a56 (the K-ranges test compares the ranged layers' bits across configs).
# 2. Bound experiments against base, 2 repetitions, alternating: how much of the prefill GEMMs' time
#    the token rows' and the weights' copies cost (1: half the token rows, what a 2-CTA multicast
#    would leave each SM to copy; 2: token rows once a unit; 3: weights once a unit).
# 3. A/B of the float4 loads where GEMM2 runs over K ranges with wide tiles, DeepSeek-R1 as control.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 120
s=$SECONDS
specs="deepseek-r1:2048,8192 qwen3-30b-a3b:4096 gpt-oss-120b:2048"
for rep in 1 2; do
  for b in base bound1 bound2 bound3; do
    for spec in $specs; do
      p=${spec%%:*}
      mkdir -p "$out/bounds_$b"
      timeout 120 gpubin/$b/fp4moe-bench --preset "$p" --tokens "${spec#*:}" --routing random --verbose \
        --json "$out/bounds_$b/head_${p}_$rep.json" > "$out/bounds_$b/head_${p}_$rep.log" 2>&1
      echo "=== bounds $b $p rep $rep exit $?" >> "$log"
    done
  done
done
for b in bound1 bound2 bound3; do
  for f in "$out"/bounds_base/head_*.json; do cp "$f" "$out/bounds_$b/base_${f##*/head_}"; done
  echo "--- $b" >> "$log"
  python3 bench/ab_summary.py "$out/bounds_$b" >> "$log" 2>&1
done
grep -h 'sm90_moe_gemm2' "$out"/bounds_bound1/head_deepseek-r1_1.log | head -2 >> "$log"
_gpu_step "bounds" 0 $((SECONDS - s))
gpu_ab range_f4 gpubin/bin/fp4moe-bench 230 mixtral-8x7b:4096,16384 llama4-scout:4096 llama4-maverick:16384 \
  deepseek-r1:2048
gpu_pack all
