#!/usr/bin/env bash
# Session 37, run 1 (one H200): the single-buffered tiles (BN64, BN80, BN96, the 4-consumer BN128)
# decode and issue one k16 step at a time, so that a warpgroup's decode overlaps its own MMAs.
# Builds: base = main 7802b20; bin = exp/k16-interleave (two fragment slots, wait<1> before each
# step); w3 = exp/k16-w3 (BN128 with four slots and wait<3>, the others as bin). First
# test_moe_gpu (every config against the reference) and the other one-GPU test binaries at bin,
# which also runs session 36's last changes on a GPU for the first time; then the three builds in
# turn over the prefill points whose tiles changed, with DeepSeek-R1 T=8 (unchanged kernels) as a
# control; then --check of the changed configs; then the Python package (session 36's stream
# checks). Staged with FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="w3=exp/k16-w3" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || { gpu_pack all; exit 1; }
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt "test_format_gpu" 120 || true
_gpu_test_bin gpubin/bin/test_routing_gpu test_routing_gpu.txt "test_routing_gpu" 120 || true
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
gpu_variants 3 "deepseek-r1:8,1536,2048,2560,4096,8192 gpt-oss-120b:2048 qwen3-30b-a3b:2048" base bin w3 || true
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1536,2048,2560,4096 gpt-oss-120b:2048 || true
gpu_check gpubin/w3/fp4moe-bench deepseek-r1:4096 || true
gpu_python 240 || true
gpu_pack all
