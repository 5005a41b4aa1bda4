#!/usr/bin/env bash
# Session 31, run 1 (main at the new >512-unit test): every GPU test, memcheck and racecheck of the
# split and range tests with the new one; Llama-4's GEMM2 range split against --no-range-split on
# one build (5 repetitions; the plan's item 0); traces of Scout T = 12 / 16 split and unsplit, and
# of the T=1 layers far from the floor (Scout, gpt-oss-120b, Qwen3-30B).
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*RangeSplitPast*:*Gemm2OverKRanges*llama4*:*SplitK*' gpu_sanitize memcheck 120
GPU_SANITIZE_FILTER='*RangeSplitPast*:*Gemm2OverKRanges*llama4*w4a16*:*SplitKMatches*' gpu_sanitize racecheck 150
gpu_check gpubin/bin/fp4moe-bench llama4-scout:12,16,24
GPU_AB_REPS=5 GPU_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-range-split \
  gpu_ab rangesplit gpubin/bin/fp4moe-bench 200 llama4-scout:4,6,8,12,16,24,32 llama4-maverick:4,8,12,16,24
for split in on off; do
  extra=; [ $split = off ] && extra=--no-range-split
  for T in 12 16; do
    s=$SECONDS
    timeout 60 gpubin/trace/fp4moe-bench --preset llama4-scout --tokens $T --routing random --verbose --trace $extra \
      > "$out/trace_scout_T${T}_split_$split.txt" 2>&1
    _gpu_step "trace llama4-scout:$T split $split" $? $((SECONDS - s))
    grep -E "^ +[0-9]+ |gemm|cycles|path|finalize|plan" "$out/trace_scout_T${T}_split_$split.txt" >> "$log"
  done
done
gpu_trace llama4-scout:1 gpt-oss-120b:1 qwen3-30b-a3b:1
gpu_pack all
