#!/usr/bin/env bash
# Session 39, run 5 (one H200): Llama-4-Maverick, the last preset not yet compared with vLLM's Marlin
# and Humming MoE GEMMs in graph replay (session 38's runs 2-3 timed Marlin eagerly), with
# fp4moe-bench --check and the torch peers. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
# (these steps were two inline functions when the run ran; they are now scripts/gpu-lib.sh's
# gpu_peer_presets, the same commands, its row printer reading the JSON lines only)
gpu_peer_presets maverick 1,8,128,4096 240 --humming llama4-maverick
gpu_pack all
