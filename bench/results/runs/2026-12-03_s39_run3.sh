#!/usr/bin/env bash
# Session 39, run 3 (one H200): run 2 found triton_kernels' routing wrong when handed its experts
# (expt_indx) and its GEMM1 right when it chooses them, but the layer still wrong. selftest's
# "hopper-steps" checks each step after GEMM1: its bias, the fused SwiGLU, GEMM2's rows, GEMM2's
# scatter with the router weights and top-k sum. Staged as run 1.
source scripts/gpu-lib.sh
gpu_init
gpu_triton_env
export CUDA_LAUNCH_BLOCKING=1
s=$SECONDS
timeout 200 python3 bench/triton/selftest.py --variant hopper-steps > "$out/selftest_steps.txt" 2>&1
_gpu_step "selftest hopper-steps (gpt-oss-20b shape)" $? $((SECONDS - s))
grep -E "T=|Error|error" "$out/selftest_steps.txt" | head -8 >> "$log"
gpu_pack all
