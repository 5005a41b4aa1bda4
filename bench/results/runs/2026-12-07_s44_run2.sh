#!/usr/bin/env bash
# Session 44, run 2 (NOT RUN in session 44: no machine started again; same staging as run 1, see its
# header). Run 1 (paired) had Marlin and Humming 16-24% slower at Mixtral-8x7B and Llama-4-Scout T=8
# than session 42's unpaired runs 4/6 on another H100, while fp4moe's T=8 times were the same
# (0.272 / 0.184 ms); at T = 1 / 128 the peers were 1-8% slower, the torch peers' GEMMs alone
# (set 0, the same routing as then) 4-10% at T=8. Routing or machine? The peers time the median
# of replays over a rotation of sets, so the median set's experts count: fp4moe-bench's Mixtral
# sets touch 8 7 8 8 8 7 8 8 (median 8), session 42's (fp4moe-bench's set 0, then seven drawn
# with seed 1000 + T) probably had a 7-expert median. On this one machine: first fp4moe-bench and
# the peers on fp4moe-bench's sets (gpu_peer_presets, which dumps them to /tmp/fp4moe-routing),
# then the peers exactly as session 42 ran them: set 0 alone in --routing-dir, so they draw the
# other seven (each set's experts in the JSON, `*_set_experts`). Then the README tables' rows at
# T <= 128 with the median set's floor, every preset, until 275 s (~290 s for the device call).
# Stage at main (its header's staging; after 309a707, which no GPU has run yet: test_moe_gpu first).
source scripts/gpu-lib.sh
gpu_init
# (main 309a707 changed the producer's unit setup after the last GPU run: tests first)
gpu_tests || { gpu_pack all; exit 1; }
gpu_humming_env
gpu_peer_presets paired 8 80 --humming mixtral-8x7b llama4-scout
mkdir -p /tmp/fp4moe-set0
for p in mixtral-8x7b llama4-scout; do
  s=$SECONDS
  cp /tmp/fp4moe-routing/${p}_T8.routing /tmp/fp4moe-set0/ \
    && timeout 60 python3 bench/peers_torch.py --preset $p --tokens 8 --routing-dir /tmp/fp4moe-set0 \
      --marlin-lib gpubin/marlin/libfp4moe_marlin_peer.so --humming --json "$out/set0_drawn_peers_$p.json" \
      > "$out/set0_drawn_peers_$p.log" 2>&1
  _gpu_step "peers on set 0 and seven drawn sets (session 42's way): $p T=8" $? $((SECONDS - s))
  python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["T"], {k: v for k, v in r.items() if k.endswith(("_ms", "set_experts", "sets_from")) or k == "active_experts"})
' "$out/set0_drawn_peers_$p.json" >> "$log" 2>&1
done
# The small-T rows of the README's tables, which the median set's floor changes (T >= 512 touches
# every expert in every set): the presets with --check, fp4moe-bench alone, in the order of the
# issue's interest (gpu_tables' full ~340 s did not fit the device time left).
t=$((275 - SECONDS))
if [ $t -ge 60 ]; then
  s=$SECONDS
  FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,32,128 OUT=$out/tables_small_t timeout $t \
    scripts/gpu-check.sh deepseek-r1 llama4-scout qwen3-30b-a3b gpt-oss-20b qwen3-235b-a22b gpt-oss-120b \
    llama4-maverick mixtral-8x7b > "$out/tables_small_t_log.txt" 2>&1
  _gpu_step "tables at small T: the presets in turn until 275 s" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |preset|ceilings|=== bench" "$out/tables_small_t_log.txt" >> "$log"
else
  echo "=== small-T tables skipped: $SECONDS s gone" >> "$log"
fi
gpu_pack all
