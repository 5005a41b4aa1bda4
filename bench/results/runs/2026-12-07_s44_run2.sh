#!/usr/bin/env bash
# Session 44, run 2 (same staging as run 1): the other presets whose session-42 peer rows were
# unpaired, against Marlin / Humming (and triton_kernels for gpt-oss) on fp4moe-bench's own routing
# sets, and session 43's prepared --max-sms sweep (runs/2026-12-07_s43_run2.sh): does the layer at
# T=8 follow the SM count (each SM's decode rate limits) or stay flat (DRAM limits)? Steps are
# skipped once 470 s have gone, so that gpu_pack runs inside the device tool's 600-s limit.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
gpu_peer_presets dsr1 1,8,16,128 110 --humming deepseek-r1
gpu_peer_presets qwen235 1,8,16 90 --humming qwen3-235b-a22b
[ $SECONDS -lt 330 ] && gpu_peer_presets gptoss120 1,8,16,128 100 "--humming --triton" gpt-oss-120b
[ $SECONDS -lt 420 ] && gpu_peer_presets qwen30 1,8,16,128 80 --humming qwen3-30b-a3b
for p in mixtral-8x7b llama4-scout; do
  for n in 132 120 108 96; do
    [ $SECONDS -lt 540 ] || break
    echo "=== $p T=8 --max-sms $n" >> "$log"
    timeout 30 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --clocks --iters 400 --verbose \
      --max-sms $n 2>&1 | grep -E "^ +[0-9]+ |clock|path" >> "$log"
  done
done
gpu_pack all
