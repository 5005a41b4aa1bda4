#!/usr/bin/env bash
# Session 40, run 3 (one H200): gpt-oss-120b at T = 8192 / 16384 with Humming (MXFP4), Marlin and
# triton_kernels, the README table's last gpt-oss points, which run 2 did not reach. Staged as run 1.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
gpu_peer_presets gptoss120 8192,16384 300 "--humming --triton" gpt-oss-120b
for f in "$out"/*/peers_*.json; do
  [ -f "$f" ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "complete:", d.get("complete"), "rows:", [r["T"] for r in d["rows"]])' "$f" >> "$log" 2>&1
done
grep -h -A3 "Traceback" "$out"/*/bench.log | head -30 >> "$log"
gpu_pack all
