#!/usr/bin/env bash
# Session 43, run 2 (one H100, kind nvidia-h100-x1; the same staging as run 1, main 4472254's source;
# NOT RUN: no machine started again in session 43):
# does the layer at Mixtral-8x7B T=8 and Llama-4-Scout T=8 follow the SM count (each SM's decode
# rate limits) or stay flat (DRAM limits)? Run 1's ncu had Mixtral's GEMM1 at 2.91-2.96 TB/s with its
# consumers waiting for data 22% of the time, GEMM2 at 2.70 (consumers 86% in K loops), and Scout's
# GEMM1 at 2.42-2.49 over 2.4 rounds. fp4moe-bench --max-sms N limits the GEMMs' grid (and the config
# choice sees N SMs: the path line says what ran), graph replay, --clocks.
source scripts/gpu-lib.sh
gpu_init
for p in mixtral-8x7b llama4-scout; do
  for n in 132 124 116 108 100 88; do
    echo "=== $p T=8 --max-sms $n" >> "$log"
    timeout 60 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --clocks --iters 400 --verbose \
      --max-sms $n 2>&1 | grep -E "^ +[0-9]+ |clock|path" >> "$log"
  done
done
gpu_pack all
