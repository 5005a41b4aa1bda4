#!/usr/bin/env bash
# Session 44, run 1: session 43's prepared paired-peers script (bench/results/runs/
# 2026-12-07_s43_prepared_paired-peers.sh: Llama-4-Scout and Mixtral-8x7B at T = 1 / 8 / 16 / 128
# against Marlin and Humming), then the README's tables (gpu_tables: DeepSeek-R1 sweep with the
# torch peers, the other presets with --check, DeepSeek-R1 w4a4). Since af64590 fp4moe-bench's
# floor, experts and TB/s are the median input set's (session 42's tables had set 0's), and the
# Marlin / Humming peers rotate through exactly fp4moe-bench's sets (their JSON rows say
# `*_routing_sets_from: fp4moe-bench`). About 480 s on an H100. Stage with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1
# FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu" scripts/stage-gpu.sh (all binaries and the peers
# exceed the carry limit). As it ran: the tables were skipped (216 s had gone at their guard).
source scripts/gpu-lib.sh
gpu_init
gpu_tests || { gpu_pack all; exit 1; }
gpu_humming_env
gpu_peer_presets scout 1,8,16,128 110 --humming llama4-scout
gpu_peer_presets mixtral 1,8,16,128 110 --humming mixtral-8x7b
if [ $SECONDS -lt 170 ]; then gpu_tables; else echo "=== tables skipped: $SECONDS s gone" >> "$log"; fi
gpu_pack all
