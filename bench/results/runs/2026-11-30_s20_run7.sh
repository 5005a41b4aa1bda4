#!/usr/bin/env bash
# Session 20, run 7 (one H200), over gpubin/ staged at main with the Python wheel's build inputs and
# a trace build (FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh): the Python package built there and its
# tests (the new max_sms test among them), then the traced timelines and per-tile cycles of
# DeepSeek-R1 T = 8 / 128 and Qwen3-30B T=8 for the next session's plan.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS=python OUT=$out/python timeout 220 scripts/gpu-check.sh > "$out/python_log.txt" 2>&1
_gpu_step "python build and tests" $? $((SECONDS - s))
grep -E "passed|failed|error|=== python" "$out/python_log.txt" | head -12 >> "$log"
gpu_trace deepseek-r1:8,128 qwen3-30b-a3b:8
gpu_pack all
