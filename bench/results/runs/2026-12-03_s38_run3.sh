#!/usr/bin/env bash
# Session 38, run 3 (one H200): the Marlin peer on the presets run 2 did not cover: gpt-oss-120b
# and gpt-oss-20b (MXFP4, with H and I padded as vLLM pads them for Marlin: run 2's gpt-oss-120b
# found no Marlin tile for 2880) and Llama-4 Scout and Maverick (NVFP4, top-1), with fp4moe-bench
# --check and the peers at T = 1, 8, 128, 1024, 4096. Staged as run 2.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,128,1024,4096 OUT=$out/presets timeout 400 \
  scripts/gpu-check.sh gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick > "$out/presets_log.txt" 2>&1
_gpu_step "presets with peers" $? $((SECONDS - s))
grep -E "^\| |ceilings|=== " "$out/presets_log.txt" >> "$log"
grep -h '"T"' "$out/presets/bench.log" | grep -o '"marlin_check": "[^"]*"' | sort | uniq -c >> "$log"
gpu_pack all
