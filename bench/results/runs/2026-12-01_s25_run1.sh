#!/usr/bin/env bash
# Prepared in session 24, run in session 25 (first the GPU tests: session 24's last test edits ran only
# on the CPU). What
# the GEMM2 K ranges cost where they do not split (perf-notes plan item 0): main against
# exp/s24-noranges (no layer has ranges: sequential K, other bits, a measurement only), an A/B at
# the points where session 24 saw the cost (Mixtral prefill +5-9% in the table run, T = 2-4 +2.4
# to +3.0% in A/Bs), and traces of both at Mixtral T = 8 / 4096 (GEMM2's cycles per tile: before,
# in and after the K loop). Then exp/s24-wide-split (a GEMM2 over K ranges keeps the 4-consumer
# decode tile where it splits and the narrowed one would not: Llama-4 / Mixtral T=2, +2.4 / +3.0%
# against the sequential K in session 24) against main at T = 1 / 2.
# Stage from main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 \
#   FP4MOE_STAGE_MORE="noranges=exp/s24-noranges widesplit=exp/s24-wide-split" \
#   FP4MOE_STAGE_TRACE_MORE="trnoranges=exp/s24-noranges" scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
export FP4MOE_AB_ARGS="--routing random" GPU_AB_REPS=3 GPU_AB_BASE_BIN=gpubin/noranges/fp4moe-bench
gpu_ab ranges gpubin/bin/fp4moe-bench 400 mixtral-8x7b:2,128,4096,16384 llama4-scout:2,4,4096 \
  llama4-maverick:4096 deepseek-r1:8
gpu_trace mixtral-8x7b:8,4096
timeout 60 gpubin/trnoranges/fp4moe-bench --preset mixtral-8x7b --tokens 8,4096 --routing random --verbose --trace \
  > "$out/trace_noranges_mixtral-8x7b.txt" 2>&1
_gpu_step "trace noranges mixtral-8x7b:8,4096" $? 0
grep -E "^ +[0-9]+ |gemm|cycles" "$out/trace_noranges_mixtral-8x7b.txt" >> "$log"
GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench gpu_ab widesplit gpubin/widesplit/fp4moe-bench 200 llama4-scout:1,2 \
  llama4-maverick:2 mixtral-8x7b:1,2
gpu_pack all
