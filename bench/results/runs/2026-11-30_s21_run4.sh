#!/usr/bin/env bash
# Session 21, run 4 (one H200): early = exp/s21-early-release (the 16-token kernels release a full
# stage at its last chunk, after waiting for that chunk's MMAs, instead of at the next stage's first
# chunk after its data is in; K loops 406 SASS instructions per four chunks against 402) against main
# (075483c). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# FP4MOE_STAGE_MORE="early=exp/s21-early-release" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
timeout 120 gpubin/early/fp4moe-bench --preset deepseek-r1 --tokens 1,8,128 --routing random --check \
  > $out/early_check.txt 2>&1
_gpu_step "early --check deepseek-r1" $? $((SECONDS - s))
tail -4 $out/early_check.txt >> $log
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=3 gpu_ab early gpubin/early/fp4moe-bench 300 deepseek-r1:1,8,32,128 qwen3-30b-a3b:8,128 \
  gpt-oss-120b:8 llama4-scout:8
gpu_pack all
