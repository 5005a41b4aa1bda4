#!/usr/bin/env bash
# Session 20, run 2 (one H200), over gpubin/ staged at 40e837f (head: the token rows a tile's MMAs
# read, and GEMM2's tile hand-off) with base 7e0e77d (main's kernels) and a = c1c9b33 (the token
# rows only): FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=7e0e77d FP4MOE_STAGE_MORE="a=c1c9b33"
# scripts/stage-gpu.sh. test_moe_gpu and racecheck on head, the A/Bs, and the SM clock and power
# of DeepSeek-R1 decode (is the decode power-capped? run 1 found its time ~1 / SMs).
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_sanitize racecheck 240
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=2 gpu_ab head gpubin/bin/fp4moe-bench 200 deepseek-r1:8,32,128 qwen3-30b-a3b:8,128 llama4-scout:8,16 \
  gpt-oss-120b:8,128
GPU_AB_REPS=2 gpu_ab rows gpubin/a/fp4moe-bench 90 deepseek-r1:8,32,128,2048
s=$SECONDS
timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 8,128,2048 --clocks \
  > "$out/clocks.txt" 2>&1
_gpu_step clocks $? $((SECONDS - s))
grep -iE "clock|MHz|W\b|power|^ +[0-9]+ " "$out/clocks.txt" | head -20 >> "$log"
gpu_pack all
