#!/usr/bin/env bash
# Session 44, run 1: session 43's prepared paired-peers script (bench/results/runs/
# 2026-12-07_s43_prepared_paired-peers.sh), widened to the other presets whose session-42 peer rows
# were unpaired, plus session 43's prepared --max-sms sweep (runs/2026-12-07_s43_run2.sh). Since
# af64590 fp4moe-bench's floor is the median input set's, --dump-routing writes every set, and the
# Marlin / Humming / triton_kernels peers rotate through exactly fp4moe-bench's sets (their JSON
# rows say `*_routing_sets_from: fp4moe-bench`). Steps are skipped once 470 s have gone, so that
# gpu_pack runs inside the device tool's 600-s limit. Stage with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1
# FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu" scripts/stage-gpu.sh (all binaries and the peers
# pass the carry limit).
source scripts/gpu-lib.sh
gpu_init
gpu_tests || { gpu_pack all; exit 1; }
gpu_humming_env
gpu_triton_env
gpu_peer_presets scout 1,8,16,128 150 --humming llama4-scout
gpu_peer_presets mixtral 1,8,16,128 150 --humming mixtral-8x7b
# Does the layer at T=8 follow the SM count (each SM's decode rate limits) or stay flat (DRAM)?
for p in mixtral-8x7b llama4-scout; do
  for n in 132 120 108 96; do
    echo "=== $p T=8 --max-sms $n" >> "$log"
    timeout 60 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --clocks --iters 400 --verbose \
      --max-sms $n 2>&1 | grep -E "^ +[0-9]+ |clock|path" >> "$log"
  done
done
[ $SECONDS -lt 400 ] && gpu_peer_presets dsr1 1,8,16,128 110 --humming deepseek-r1
[ $SECONDS -lt 430 ] && gpu_peer_presets qwen235 1,8,16 90 --humming qwen3-235b-a22b
[ $SECONDS -lt 450 ] && gpu_peer_presets qwen30 1,8,16,128 90 --humming qwen3-30b-a3b
[ $SECONDS -lt 470 ] && gpu_peer_presets gptoss120 1,8,16,128 100 "--humming --triton" gpt-oss-120b
gpu_pack all
