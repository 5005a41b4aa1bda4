#!/usr/bin/env bash
# Session 46, run 2 (the last ~270 device seconds after eight failed starts): the smallest
# validation of sessions 45-46's changes: test_moe_gpu, then fp4moe-bench --check (the column
# bound's values) at DeepSeek-R1 with the model router (T = 1 / 8 / 128) and in w4a4 (T = 1 / 16).
# Staging as run 1's. Device command: bash bench/results/runs/2026-12-07_s46_run2_min.sh; cat $OUT/run.txt
source scripts/gpu-lib.sh
gpu_init
gpu_tests 90 || { gpu_pack all; exit 1; }
for spec in "w4a16:model:1,8,128" "w4a4:random:1,16"; do
  IFS=: read -r mode routing tokens <<< "$spec"
  s=$SECONDS
  timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode "$mode" --routing "$routing" --tokens "$tokens" \
    --check --json "$out/min_$mode.json" > "$out/min_$mode.txt" 2>&1
  _gpu_step "fp4moe-bench --check, deepseek-r1 $mode, --routing $routing, T=$tokens" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |check:" "$out/min_$mode.txt" >> "$log"
done
gpu_pack all
