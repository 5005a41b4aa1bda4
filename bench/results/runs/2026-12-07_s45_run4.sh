#!/usr/bin/env bash
# Session 45, run 4 (asked of an H200: the issue's targets are an H200's; same staging as runs 1-3):
# the README tables' rows at T <= 128 with the median set's floor (every preset, --check; the H200
# tables' x-floor ratios at small T are still input set 0's), then DeepSeek-R1 T = 2048 / 8192
# (timing only). Guards keep the call near 300 s.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,32,128 OUT=$out/tables_small_t timeout 230 \
  scripts/gpu-check.sh deepseek-r1 llama4-scout qwen3-30b-a3b gpt-oss-20b qwen3-235b-a22b gpt-oss-120b \
  llama4-maverick mixtral-8x7b > "$out/tables_small_t_log.txt" 2>&1
_gpu_step "tables at small T: every preset" $? $((SECONDS - s))
grep -E "^ +[0-9]+ |preset|ceilings|=== bench" "$out/tables_small_t_log.txt" >> "$log"
if [ $SECONDS -lt 270 ]; then
  echo "=== deepseek-r1 T=2048,8192 (timing only)" >> "$log"
  timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 2048,8192 --clocks \
    --json "$out/deepseek_prefill.json" 2>&1 | grep -E "^ +[0-9]+ |clock|ceilings" >> "$log"
fi
gpu_pack all
