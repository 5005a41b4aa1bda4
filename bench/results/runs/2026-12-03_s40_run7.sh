#!/usr/bin/env bash
# Session 40, run 7 (one H200): run 6 found BN16 faster than the default BN32 at 12 rows per expert
# for Qwen3-30B and gpt-oss-20b (DeepSeek-R1 the other way). BN16 against BN32 from 10 to 20 rows
# per expert on seven presets, to see where the threshold (8 rows) should be. Staged as run 5.
source scripts/gpu-lib.sh
gpu_init
only=BN16_C4_S4_x1_db_c4,BN32_C4_S5_x1_db_c2
for spec in qwen3-30b-a3b:160,192,256,320 gpt-oss-20b:80,96,128,160 deepseek-r1:320,384,512,640 \
            gpt-oss-120b:320,384,512 mixtral-8x7b:40,48,64,80 llama4-scout:160,192,256 qwen3-235b-a22b:192,256; do
  s=$SECONDS
  timeout 120 gpubin/bin/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random \
    --tune "$out/tune_${spec%%:*}.txt" --tune-only $only > "$out/tune_${spec%%:*}_log.txt" 2>&1
  _gpu_step "tune $spec" $? $((SECONDS - s))
  grep -E "^ +[0-9]+  BN" "$out/tune_${spec%%:*}_log.txt" >> "$log"
done
gpu_pack all
