#!/usr/bin/env bash
# Session 44, run 2 (same staging as run 1, plus peers_torch.py's `*_set_experts` for drawn sets).
# Run 1 (paired) had Marlin and Humming 16-24% slower at Mixtral-8x7B and Llama-4-Scout T=8 than
# session 42's unpaired run 4/6 on another H100, while fp4moe's times were the same (0.272 / 0.184
# ms); the torch peers (set 0 alone, the same routing as before) were 20-35% slower too. Is it the
# routing sets or the machine? First the two peers at T=8 on their own drawn sets (no
# --routing-dir: set 0 drawn too, each set's experts in the JSON), then fp4moe-bench and the peers on
# fp4moe-bench's sets, on this one machine. Then the README's tables with the median set's floor
# (gpu_tables, ~340 s on an H100), then DeepSeek-R1 and Qwen3-235B paired at T = 8 / 16 if time is
# left. Steps are skipped so that gpu_pack runs inside the device tool's 600-s limit.
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
if [ $SECONDS -lt 200 ]; then gpu_tables; else echo "=== tables skipped: $SECONDS s gone" >> "$log"; fi
[ $SECONDS -lt 500 ] && gpu_peer_presets dsr1 8,16 60 --humming deepseek-r1
[ $SECONDS -lt 530 ] && gpu_peer_presets qwen235 8,16 50 --humming qwen3-235b-a22b
gpu_pack all
