#!/usr/bin/env bash
# Session 39, run 5 (one H200): Llama-4-Maverick, the last preset not yet compared with vLLM's Marlin
# and Humming MoE GEMMs in graph replay (session 38's runs 2-3 timed Marlin eagerly), with
# fp4moe-bench --check and the torch peers. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
peer_rows() {  # the extra peers' fields of each row of a bench.log
  grep -h '"T"' "$1" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    cells = [str(r["T"])]
    for p in ("triton", "marlin", "humming"):
        keys = sorted(k for k in r if k.startswith(p + "_"))
        if keys:
            cells.append(p + ": " + ", ".join(f"{k[len(p) + 1:]}={r[k]}" for k in keys))
    print(" | ".join(cells))
' >> "$log" 2>&1
}
run_presets() {  # NAME TOKENS TIMEOUT PEERS_ARGS PRESETS...
  local name=$1 tokens=$2 limit=$3 peers_args=$4 s=$SECONDS
  shift 4
  FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=$tokens FP4MOE_PEERS_TIMEOUT=$limit FP4MOE_PEERS_ARGS=$peers_args \
    OUT=$out/$name timeout $((limit + 60)) scripts/gpu-check.sh "$@" > "$out/${name}_log.txt" 2>&1
  _gpu_step "$name: $* at T=$tokens" $? $((SECONDS - s))
  grep -E "^\| |^ +[0-9]+ |ceilings|=== " "$out/${name}_log.txt" >> "$log"
  peer_rows "$out/$name/bench.log"
  grep -iE "unavailable|Traceback|Error" "$out/$name/bench.log" | grep -v '^{' | head -20 >> "$log"
}
run_presets maverick 1,8,128,4096 240 --humming llama4-maverick
gpu_pack all
