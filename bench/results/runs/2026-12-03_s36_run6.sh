#!/usr/bin/env bash
# Session 36, run 6 (one H200): the README's DeepSeek-R1 sweep with the torch peers (gpu_tables' first
# part) at main's head, after the session's host-side changes (the stream check adds host time to
# stream launches only; no kernel changed). Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 OUT=$out/tables_deepseek \
  timeout 200 scripts/gpu-check.sh deepseek-r1 > "$out/tables_deepseek_log.txt" 2>&1
_gpu_step "tables: deepseek-r1 sweep with peers" $? $((SECONDS - s))
grep -E "^\| |^ +[0-9]+ |ceilings" "$out/tables_deepseek_log.txt" >> "$log"
gpu_pack all
