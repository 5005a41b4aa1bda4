#!/usr/bin/env bash
# Session 38, run 1 (one H200), main with the Marlin peer: first the GPU tests of the refusals that
# session 37 moved to cuda_utils' check_reachable (route_gpu's and the codec's), then test_moe_gpu,
# then the DeepSeek-R1 sweep with the peers, now with vLLM's Marlin MoE GEMMs alone beside the torch
# ones (bench/peers_marlin.py). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_routing_gpu test_routing_gpu.txt test_routing_gpu 120
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt test_format_gpu 120
gpu_tests 120
gpu_deepseek_sweep 300
grep -E "marlin|Marlin|Error|error" "$out/tables_deepseek/bench.log" | head -40 >> "$log"
gpu_pack all
