#!/usr/bin/env bash
# Session 34, run 6 (one H200): test_moe_gpu after the final review refactor (forward_inputs shared by MoeLayer and ParallelMoe
# ), memcheck of the argument-refusal tests (run 3 --checked the layer points).
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
GPU_SANITIZE_FILTER='*ForwardRefuses*:*ForwardRejects*:*OutOfRange*' gpu_sanitize memcheck 120 || true
gpu_pack all
