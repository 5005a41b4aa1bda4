#!/usr/bin/env bash
# Session 40, run 1 (one H200): the Humming peer on gpt-oss's MXFP4 weights (the gpt_oss_mxfp4
# schema), beside Marlin and triton_kernels, at the README table's gpt-oss points; and the first
# GPU run of peers_torch's JSON rewritten after every token count (its `complete` flag). Staged with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
# the pytest of the peers' CPU helpers under the image's PyTorch (the Humming tests among them)
s=$SECONDS
timeout 120 python3 -m pytest -q tests/python/test_bench_tools.py > "$out/test_bench_tools.txt" 2>&1
_gpu_step "test_bench_tools (image's PyTorch)" $? $((SECONDS - s))
tail -2 "$out/test_bench_tools.txt" >> "$log"
gpu_peer_presets gptoss120 1,8,128,1024,4096 260 "--humming --triton" gpt-oss-120b
[ $SECONDS -lt 360 ] && gpu_peer_presets gptoss20 1,8,128,4096 170 "--humming --triton" gpt-oss-20b
for f in "$out"/gptoss*/peers_*.json; do
  [ -f "$f" ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "complete:", d.get("complete"), "rows:", [r["T"] for r in d["rows"]], "humming:", d.get("humming"))' "$f" >> "$log" 2>&1
done
gpu_pack all
