#!/usr/bin/env bash
# Session 21, run 2 (one H200): run 1 found the order of a stage's copies matters (weights first
# +16-20%) and that the token rows' copies cost something (notok, whose stale token slots made its
# values garbage). Against main (075483c): lsutok = exp/s21-lsutok (the producer's second warp copies
# the token rows with cp.async, off the TMA unit), notok0 = exp/s21-notok0 (DIAGNOSTIC: no token
# copies, token slots zeroed at start), tok1 = exp/s21-tok1 (DIAGNOSTIC: one 4-KB token copy a stage
# instead of four of 1 KB). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# FP4MOE_STAGE_MORE="lsutok=exp/s21-lsutok notok0=exp/s21-notok0 tok1=exp/s21-tok1" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
timeout 120 gpubin/lsutok/fp4moe-bench --preset deepseek-r1 --tokens 8,128 --routing random --check \
  > $out/lsutok_check.txt 2>&1
_gpu_step "lsutok --check deepseek-r1" $? $((SECONDS - s))
s=$SECONDS
timeout 60 gpubin/lsutok/fp4moe-bench --preset qwen3-30b-a3b --tokens 8,64 --routing random --check \
  > $out/lsutok_check_qwen.txt 2>&1
_gpu_step "lsutok --check qwen3-30b-a3b" $? $((SECONDS - s))
grep -i "check\|error\|fail" $out/lsutok_check*.txt | head -8 >> $log
export FP4MOE_AB_ARGS="--routing random"
for v in lsutok notok0 tok1; do
  GPU_AB_REPS=2 gpu_ab $v gpubin/$v/fp4moe-bench 140 deepseek-r1:8,128 qwen3-30b-a3b:8
done
gpu_pack all
