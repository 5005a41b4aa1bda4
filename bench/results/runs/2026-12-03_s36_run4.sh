#!/usr/bin/env bash
# Session 36, run 4 (one H200): FP4MOE_CUDA_LAUNCH_CHECK now takes the pending error
# (cudaGetLastError) instead of peeking at it, with a test_format_gpu test that a pending error is
# reported once and the next call runs; every one-GPU test binary and fp4moe-bench --check at
# DeepSeek-R1 T = 1 / 8 / 128 and Qwen3-30B T = 1 / 8 over it. Staged with FP4MOE_STAGE_PYTHON=0
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt "test_format_gpu" 120 || true
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_routing_gpu test_routing_gpu.txt "test_routing_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8,128 qwen3-30b-a3b:1,8 || true
gpu_pack all
