#!/usr/bin/env bash
# GPU run (session 10, run 7): main. Split-K (LayerOptions::split_k, opt-in) against the default in
# one build, now that the narrow decode config and the GEMM overlap exist (its last numbers were
# from session 4, before both).
set -u
o=$OUT; log=$o/a_run7.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
SECONDS=0
FP4MOE_AB_HEAD_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
  FP4MOE_AB_HEAD_ARGS="--split-k --verbose" FP4MOE_AB_REPS=2 timeout 330 scripts/gpu-ab.sh \
  llama4-scout:1,2,4 llama4-maverick:1,2 mixtral-8x7b:1,2 gpt-oss-120b:1,2 qwen3-30b-a3b:1,2 deepseek-r1:1 > $log 2>&1
echo "($SECONDS s)" >> $log
grep -h "split-K\|path" $o/ab/head_*_1.log | sort | uniq | head -30 >> $log
