#!/usr/bin/env bash
# Session 44, run 2 (same staging as run 1, plus peers_torch.py's `*_set_experts` for drawn sets).
# Run 1 (paired) had Marlin and Humming 16-24% slower at Mixtral-8x7B and Llama-4-Scout T=8 than
# session 42's unpaired run 4/6 on another H100, while fp4moe's times were the same (0.272 / 0.184
# ms); the torch peers (set 0 alone, the same routing as before) were 20-35% slower too. Is it the
# routing sets or the machine? First the two peers at T=8 on their own drawn sets (no
# --routing-dir: set 0 drawn too, each set's experts in the JSON), then fp4moe-bench and the peers on
# fp4moe-bench's sets, on this one machine. Then the README tables' rows at T <= 128 with the
# median set's floor, every preset. Steps are skipped so that gpu_pack runs inside the device time
# left (~290 s: the presets in the order of the interest, until 275 s).
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
for p in mixtral-8x7b llama4-scout; do
  s=$SECONDS
  timeout 60 python3 bench/peers_torch.py --preset $p --tokens 8 --marlin-lib gpubin/marlin/libfp4moe_marlin_peer.so \
    --humming --json "$out/own_sets_peers_$p.json" > "$out/own_sets_peers_$p.log" 2>&1
  _gpu_step "peers on their own drawn sets: $p T=8" $? $((SECONDS - s))
  python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["T"], {k: v for k, v in r.items() if k.endswith(("gemms_ms", "set_experts", "sets_from")) or k == "active_experts"})
' "$out/own_sets_peers_$p.json" >> "$log" 2>&1
done
gpu_peer_presets paired 8 70 --humming mixtral-8x7b llama4-scout
# The small-T rows of the README's tables, which the median set's floor changes (T >= 512 touches
# every expert in every set): every preset with --check, fp4moe-bench alone (gpu_tables' full
# ~340 s did not fit the device time left).
if [ $SECONDS -lt 220 ]; then
  s=$SECONDS
  FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,32,128 OUT=$out/tables_small_t timeout $((275 - SECONDS)) \
    scripts/gpu-check.sh deepseek-r1 llama4-scout qwen3-30b-a3b gpt-oss-20b qwen3-235b-a22b gpt-oss-120b \
    llama4-maverick mixtral-8x7b > "$out/tables_small_t_log.txt" 2>&1
  _gpu_step "tables at small T: the presets in turn until 275 s" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |preset|ceilings|=== bench" "$out/tables_small_t_log.txt" >> "$log"
else
  echo "=== small-T tables skipped: $SECONDS s gone" >> "$log"
fi
gpu_pack all
