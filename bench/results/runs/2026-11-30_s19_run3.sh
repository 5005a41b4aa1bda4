#!/usr/bin/env bash
# Session 19, run 3 (one H200), over gpubin/ staged at main with the prologue fix (bf662f9's
# kernels; FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh): test_moe_gpu, racecheck over the default
# filter, then the DeepSeek-R1 sweep with --check and the torch peers (the README's first table).
source scripts/gpu-lib.sh
gpu_init
gpu_tests 100 || { gpu_pack all; exit 1; }
gpu_sanitize racecheck 300
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 OUT=$out/sweep timeout 170 \
  scripts/gpu-check.sh deepseek-r1 > "$out/sweep_log.txt" 2>&1
_gpu_step "deepseek-r1 sweep with peers" $? $((SECONDS - s))
grep -hE "^ +[0-9]+ |TFLOP|TB/s|peer|torch" "$out/sweep_log.txt" | head -40 >> "$log"
gpu_pack all
