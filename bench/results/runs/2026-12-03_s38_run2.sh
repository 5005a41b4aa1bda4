#!/usr/bin/env bash
# Session 38, run 2 (one H200): the Marlin peer again after run 1's all-zero check (NVFP4's global
# scale and scale bytes now as vLLM processes them for Marlin): the DeepSeek-R1 sweep with the peers,
# then four presets (three NVFP4, gpt-oss-120b MXFP4) with fp4moe-bench --check and the peers at
# T = 1, 8, 128, 1024, 4096. Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_deepseek_sweep 200
grep -h '"T"' "$out/tables_deepseek/bench.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("marlin", r["T"], r.get("marlin_block_m"), r.get("marlin_gemms_ms"), r.get("marlin_check"), r.get("marlin_gemms_error", ""))
' >> "$log" 2>&1
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,128,1024,4096 OUT=$out/presets timeout 300 \
  scripts/gpu-check.sh qwen3-30b-a3b qwen3-235b-a22b gpt-oss-120b mixtral-8x7b > "$out/presets_log.txt" 2>&1
_gpu_step "presets with peers" $? $((SECONDS - s))
grep -E "^\| |ceilings|=== " "$out/presets_log.txt" >> "$log"
grep -h '"T"' "$out/presets/bench.log" | grep -o '"marlin_check": "[^"]*"' | sort | uniq -c >> "$log"
gpu_pack all
