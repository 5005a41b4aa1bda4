#!/usr/bin/env bash
# Session 44, run 2: the README's tables (gpu_tables: DeepSeek-R1 sweep with the torch peers, the
# other presets with --check, DeepSeek-R1 w4a4) with fp4moe-bench's floor, experts and TB/s taken
# from the median input set (since af64590), where session 42's run 2 had set 0's. Same staging as
# run 1.
source scripts/gpu-lib.sh
gpu_init
gpu_tables
gpu_pack all
