#!/usr/bin/env bash
# Session 24, run 1 (one H200): main 627db03 after session 23's two unrun changes (kernel_info's
# ", dynamic units" checked by the overlap test; direct GEMM1's count_direct_unit lambda): tests,
# racecheck of the overlap and direct-GEMM1 tests, then session 23's prepared run 5 (traces of the
# decode points: where GEMM2's dynamically scheduled CTAs end; Llama-4-Scout T=8 against its model).
# Staged from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*OneForwardAtATime*:*DirectGemm1*' gpu_sanitize racecheck 150
gpu_trace qwen3-30b-a3b:1,8 deepseek-r1:8 gpt-oss-20b:8 llama4-scout:1,8 mixtral-8x7b:1
gpu_pack all
