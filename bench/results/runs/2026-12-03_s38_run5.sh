#!/usr/bin/env bash
# Session 38, run 5 (one H200): run 4's peers (Marlin and Humming, CUDA-graph replay, routing sets in
# rotation at T <= 128, per-expert checks) on Llama-4-Scout (run 3's closest point to Marlin),
# Mixtral and gpt-oss-120b (MXFP4: Marlin only; Humming runs NVFP4 here) at T = 1 / 8 / 128 / 4096,
# with fp4moe-bench --check and the torch peers. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,128,4096 FP4MOE_PEERS_ARGS=--humming FP4MOE_PEERS_TIMEOUT=150 \
  OUT=$out/presets timeout 300 scripts/gpu-check.sh llama4-scout mixtral-8x7b gpt-oss-120b > "$out/presets_log.txt" 2>&1
_gpu_step "scout, mixtral, gpt-oss-120b with peers (marlin, humming)" $? $((SECONDS - s))
grep -E "^\| |ceilings|=== " "$out/presets_log.txt" >> "$log"
grep -h '"T"' "$out/presets/bench.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["T"], "humming", r.get("humming_gemms_ms"), r.get("humming_check"), r.get("humming_gemms_error", ""),
          "| marlin", r.get("marlin_gemms_ms"), r.get("marlin_gemms_eager_ms"), r.get("marlin_check"))
' >> "$log" 2>&1
gpu_pack all
