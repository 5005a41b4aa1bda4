#!/usr/bin/env bash
# Session 40, run 2 (one H200): run 1 again with the Humming layers padded as vLLM pads them (N to
# 256, K to 128; run 1's gpt-oss calls failed Humming's tile-divides-problem assertion), peers_torch
# naming where a failure was raised; then Qwen3-30B with Humming, whose shapes the padding leaves
# as they were (session 38-39's NVFP4 numbers to compare). Staged as run 1.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
s=$SECONDS
timeout 120 python3 -m pytest -q tests/python/test_bench_tools.py > "$out/test_bench_tools.txt" 2>&1
_gpu_step "test_bench_tools (image's PyTorch)" $? $((SECONDS - s))
tail -2 "$out/test_bench_tools.txt" >> "$log"
gpu_peer_presets gptoss120 1,8,128,1024,4096 260 "--humming --triton" gpt-oss-120b
[ $SECONDS -lt 330 ] && gpu_peer_presets gptoss20 1,8,128,4096 170 "--humming --triton" gpt-oss-20b
[ $SECONDS -lt 450 ] && gpu_peer_presets qwen30 1,128 90 --humming qwen3-30b-a3b
for f in "$out"/*/peers_*.json; do
  [ -f "$f" ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "complete:", d.get("complete"), "rows:", [r["T"] for r in d["rows"]], "humming:", d.get("humming"))' "$f" >> "$log" 2>&1
done
grep -h -A3 "Traceback" "$out"/*/bench.log | head -30 >> "$log"
gpu_pack all
