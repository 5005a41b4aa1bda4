#!/usr/bin/env bash
# Session 39, run 4 (one H200): the triton_kernels peer after runs 2-3 (routing choosing the experts
# from the router logits, as vLLM's gpt-oss path does), gpt-oss-120b and gpt-oss-20b with fp4moe-bench
# --check, the torch peers, Marlin and triton_kernels; then Qwen3-235B against Marlin and Humming in
# graph replay (session 38 timed it only eagerly), if the call's time allows. Staged with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
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
# (the device call's 600 s: each later step only when the time left covers its limit)
run_presets gptoss120 1,8,128,1024,4096 200 --triton gpt-oss-120b
[ $SECONDS -lt 380 ] && run_presets gptoss20 1,8,128,4096 120 --triton gpt-oss-20b
[ $SECONDS -lt 330 ] && run_presets qwen235 1,8,128,2048 150 --humming qwen3-235b-a22b
gpu_pack all
