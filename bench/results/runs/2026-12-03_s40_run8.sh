#!/usr/bin/env bash
# Session 40, run 8 (one H200): BN16 up to 10 rows per expert (was 8; runs 6-7's --tune): test_moe_gpu
# (its default-config tests now at T=352 for BN32), and --check at points the new threshold moves to
# BN16 (10 rows) and at the first BN32 point (11). Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
gpu_check gpubin/bin/fp4moe-bench qwen3-30b-a3b:160,176 gpt-oss-20b:80,88 deepseek-r1:320,352 mixtral-8x7b:40
grep -E "^ +[0-9]+ |path" "$out/check_bin.txt" >> "$log"
gpu_pack all
