#!/usr/bin/env bash
# Session 19, run 4 (one H200): fp4moe-bench's timing, stream launches then graph replays (base:
# main f9350d4) against the two alternating in blocks of 10 (head), with --clocks, same kernels.
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=f9350d4 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
export FP4MOE_AB_ARGS="--routing random --clocks"
GPU_AB_REPS=2 gpu_ab timing gpubin/bin/fp4moe-bench 200 deepseek-r1:8,32,128,2048,8192
for f in "$out"/ab_timing/ab/*.log; do echo "--- $(basename "$f")"; grep -E "^ +[0-9]+ |clocks" "$f"; done >> "$log"
gpu_pack all
