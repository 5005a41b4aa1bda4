#!/usr/bin/env bash
# Session 34, run 3 (one H200): test_moe_gpu again after run 2's test fix (the overlap case's out inside
# the workspace), memcheck of the argument-refusal tests, and --check at a few layer points.
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
GPU_SANITIZE_FILTER='*ForwardRefuses*:*ForwardRejects*:*OutOfRange*' gpu_sanitize memcheck 120 || true
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8,128 qwen3-30b-a3b:1,8
gpu_pack all
