#!/usr/bin/env bash
# Prepared in session 26, run in session 27 (its sanitizer limits cut to fit one 600 s call). Session 26's last commit ran only
# on the CPU: GEMM2's tail launch now reuses the main launch's K-range slots, the K-ranges GPU test
# is one instance per layer and mode, and tests/test_tma_row_gather_gpu.cu asks whether one-row TMA
# boxes land in the token tiles' swizzle (the question before a GEMM1 without the permute:
# docs/perf-notes.md, the plan), and bench/gather_probe.cu times three ways of gathering rows. Run
# those probes, the GPU tests, racecheck of one K-ranges instance
# (the whole test did not finish in 330 s), memcheck of the tail-launch ranges (T=150 of every
# instance runs a BN128 tile and its BN32 tail over ranges) and of the new back-to-back test of the
# prefill tiles' dynamic units.
# Stage from main: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_tma_row_gather_gpu test_tma_row_gather_gpu.txt test_tma_row_gather_gpu 30
s=$SECONDS; timeout 60 gpubin/bin/fp4moe-gather-probe > "$out/gather_probe.txt" 2>&1
_gpu_step "fp4moe-gather-probe" $? $((SECONDS - s)); cat "$out/gather_probe.txt" >> "$log"
gpu_tests 150
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*/mixtral_8x7b_I16832_w4a16' gpu_sanitize racecheck 170
GPU_SANITIZE_FILTER='*Gemm2OverKRanges*/llama4_scout_I8192_w4a16:*TailTiles*:*PrefillTilesBackToBack*' \
  gpu_sanitize memcheck 150
gpu_pack all
