#!/usr/bin/env bash
# Session 28, run 4: the README's tables (DeepSeek-R1 sweep with the torch peers, the presets, w4a4)
# on main 68b4c77 (run 3's staged build: the float4 K-range totals of session 27 and run 3's
# scheduling-thread wait since session 26's tables). Staged as run 3.
source scripts/gpu-lib.sh
gpu_init
gpu_tables
gpu_pack all
