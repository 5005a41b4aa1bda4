#!/usr/bin/env bash
# Session 45, run 3 (same staging as runs 1-2, one H100): what run 1 (session 44's run 2) left of the
# small-T table rows with the median set's floor (Llama-4-Maverick and Mixtral-8x7B, --check), then
# session 43's --max-sms sweep at Mixtral / Scout T=8 (runs/2026-12-07_s43_run2.sh: does the layer
# follow the SM count or the DRAM?), then DeepSeek-R1 prefill T = 2048 / 8192 (timing only; the
# issue's 75%-of-bf16 target) while time is left (guards at 330 s).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,32,128 OUT=$out/tables_small_t timeout 120 \
  scripts/gpu-check.sh llama4-maverick mixtral-8x7b > "$out/tables_small_t_log.txt" 2>&1
_gpu_step "tables at small T: Maverick, Mixtral" $? $((SECONDS - s))
grep -E "^ +[0-9]+ |preset|ceilings|=== bench" "$out/tables_small_t_log.txt" >> "$log"
for p in mixtral-8x7b llama4-scout; do
  for n in 132 116 100 88; do
    [ $SECONDS -lt 300 ] || { echo "=== --max-sms sweep stopped: $SECONDS s gone" >> "$log"; break 2; }
    echo "=== $p T=8 --max-sms $n" >> "$log"
    timeout 40 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --clocks --iters 400 --verbose \
      --max-sms $n 2>&1 | grep -E "^ +[0-9]+ |clock|path" >> "$log"
  done
done
if [ $SECONDS -lt 330 ]; then
  echo "=== deepseek-r1 T=2048,8192 (timing only)" >> "$log"
  timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 2048,8192 --clocks \
    --json "$out/deepseek_prefill.json" 2>&1 | grep -E "^ +[0-9]+ |clock|ceilings|T " >> "$log"
fi
gpu_pack all
