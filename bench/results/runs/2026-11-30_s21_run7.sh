#!/usr/bin/env bash
# Session 21, run 7 (one H200), the same gpubin/ as run 6 (exp/s21-count 1698242): racecheck of the
# overlap test alone, whose run 6 racecheck (with the direct GEMM1 test) hit its 150-s limit
# (session 20: 58 s for this test on main's kernels).
source scripts/gpu-lib.sh
gpu_init
GPU_SANITIZE_FILTER='*GemmOverlap*' gpu_sanitize racecheck 320
grep -h "OK \]\|RUN" $out/racecheck.txt >> $log
gpu_pack all
