#!/usr/bin/env bash
# Session 37, run 2 (one H200), main: the README's DeepSeek-R1 sweep with the torch peers, which now
# also time each peer's two grouped GEMMs alone (inputs permuted and quantized beforehand: a lower
# bound for any layer built on those GEMMs). (The Python step planned here was dropped: two machine
# starts that failed had spent the device time it needed.) Staged with scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 OUT=$out/tables_deepseek \
  timeout 260 scripts/gpu-check.sh deepseek-r1 > "$out/tables_deepseek_log.txt" 2>&1
_gpu_step "deepseek-r1 sweep with peers" $? $((SECONDS - s))
grep -E "^\| |^ +[0-9]+ |ceilings|=== " "$out/tables_deepseek_log.txt" >> "$log"
gpu_pack all
