#!/usr/bin/env bash
# Session 21, run 3 (one H200): does a second copy path raise a decode SM's rate? GEMM2's 16-token
# kernels with the producer's whole first warp copying each stage's last one (lsuw = exp/s21-lsuw,
# 921037d) or two (lsuw2 = exp/s21-lsuw2, b685373) K chunks of weights with cp.async through the LSU,
# the TMA unit the rest; GEMM1 unchanged (its K loop is main's 402 instructions in both). Against main
# (075483c). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# FP4MOE_STAGE_MORE="lsuw=exp/s21-lsuw lsuw2=exp/s21-lsuw2" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
for v in lsuw lsuw2; do
  s=$SECONDS
  timeout 120 gpubin/$v/fp4moe-bench --preset deepseek-r1 --tokens 8,128 --routing random --check \
    > $out/${v}_check.txt 2>&1
  _gpu_step "$v --check deepseek-r1" $? $((SECONDS - s))
  tail -3 $out/${v}_check.txt >> $log
done
export FP4MOE_AB_ARGS="--routing random"
for v in lsuw lsuw2; do
  GPU_AB_REPS=2 gpu_ab $v gpubin/$v/fp4moe-bench 140 deepseek-r1:8,32,128 qwen3-30b-a3b:8
done
gpu_pack all
