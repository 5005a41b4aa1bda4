#!/usr/bin/env bash
# Session 21, run 1 (one H200): what limits the decode producers' copy issue. Four builds against
# main (075483c) at DeepSeek-R1 T = 8 / 128 and Qwen3-30B T=8: notok = exp/s21-notok (a7ce616,
# DIAGNOSTIC, wrong results: the 16-token kernels copy no token tiles), wfirst = exp/s21-wfirst
# (43e11a5: each stage's weight copy before its token tiles), wsplit = exp/s21-wsplit (fe0a539: one
# weight copy per K chunk, four a stage), l2pf = exp/s21-l2pf (223b0ce: the producer prefetches the
# weights two stages ahead into L2). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# FP4MOE_STAGE_MORE="notok=exp/s21-notok wfirst=exp/s21-wfirst wsplit=exp/s21-wsplit l2pf=exp/s21-l2pf"
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
export FP4MOE_AB_ARGS="--routing random"
for v in notok l2pf wfirst wsplit; do
  GPU_AB_REPS=2 gpu_ab $v gpubin/$v/fp4moe-bench 140 deepseek-r1:8,128 qwen3-30b-a3b:8
done
gpu_pack all
