#!/usr/bin/env bash
# Session 38, run 4 (one H200): the Humming peer (vLLM's Humming MoE GEMMs, humming-kernels 0.1.19,
# which vLLM 0.34 ranks ahead of Marlin for NVFP4 MoE on Hopper; bench/peers_humming.py), first run,
# and both extra peers now timed in CUDA-graph replay with routing sets in rotation at T <= 128 (the
# review of runs 2-3 found their eager times host-bound at small T), their checks with a factor per
# expert: Qwen3-30B at T = 1 / 8 / 128 / 1024 and DeepSeek-R1 at T = 1 / 8 / 128 / 2048 / 8192 with
# fp4moe-bench --check, the torch peers, Marlin and Humming (its kernels JIT-compiled there on
# first use). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,128,1024,2048,8192 FP4MOE_PEERS_ARGS=--humming FP4MOE_PEERS_TIMEOUT=200 \
  OUT=$out/deepseek timeout 430 scripts/gpu-check.sh qwen3-30b-a3b deepseek-r1 > "$out/deepseek_log.txt" 2>&1
_gpu_step "qwen3-30b and deepseek-r1 with peers (marlin, humming)" $? $((SECONDS - s))
grep -E "^\| |^ +[0-9]+ |ceilings|=== " "$out/deepseek_log.txt" >> "$log"
grep -h '"T"' "$out/deepseek/bench.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["T"], "humming", r.get("humming_block_m"), r.get("humming_gemms_ms"), r.get("humming_gemms_eager_ms"),
          r.get("humming_check"), r.get("humming_gemms_error", ""), "| marlin", r.get("marlin_gemms_ms"),
          r.get("marlin_gemms_eager_ms"), r.get("marlin_check"), r.get("marlin_gemms_error", ""))
' >> "$log" 2>&1
grep -i "humming" "$out/deepseek/bench.log" | grep -v '^{' | head -20 >> "$log"
gpu_pack all
