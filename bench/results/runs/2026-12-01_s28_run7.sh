#!/usr/bin/env bash
# Session 28, run 7: tile_expert as a four-way search (929bbf7; run 6 traced GEMM2's producer setup to
# its lookup, ~2000 cycles a unit at decode), against 893c15e: the GPU tests, an A/B at decode,
# the trace at Qwen3-30B T=8. Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=893c15e
# FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_ab search4 gpubin/bin/fp4moe-bench 200 deepseek-r1:8,32,128 qwen3-30b-a3b:8,16,128 gpt-oss-20b:8 llama4-scout:8
gpu_trace qwen3-30b-a3b:8
gpu_pack all
