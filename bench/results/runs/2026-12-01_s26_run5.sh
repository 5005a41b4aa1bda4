#!/usr/bin/env bash
# Session 26, run 5: the README's tables at main (the wide tiles' dynamic units merged). The GPU
# tests ran on these kernels in runs 2 and 4 (run 4's head is main plus the permute), so this run
# goes straight to the tables to fit the session's last device minutes.
# Stage from main: FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tables
gpu_pack all
