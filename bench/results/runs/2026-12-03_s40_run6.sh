#!/usr/bin/env bash
# Session 40, run 6 (one H200): with BN32's overlap (94144cb), does BN32 now beat BN16 at the decode
# threshold (8 rows per expert, where select_config picks BN16) or below? --tune of BN16, BN32 and
# the tail kernels' BN32 (the old BN32) at 4-12 rows per expert: Qwen3-30B T = 64 / 128 / 192,
# gpt-oss-20b T = 64 / 96, DeepSeek-R1 T = 256 / 384, gpt-oss-120b T = 256. Staged as run 5.
source scripts/gpu-lib.sh
gpu_init
only=BN16_C4_S4_x1_db_c4,BN32_C4_S5_x1_db_c2,BN32_C4_S5_x1_db_c2_tail
for spec in qwen3-30b-a3b:64,128,192 gpt-oss-20b:64,96 deepseek-r1:256,384 gpt-oss-120b:256; do
  s=$SECONDS
  timeout 150 gpubin/bin/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random \
    --tune "$out/tune_${spec%%:*}.txt" --tune-only $only > "$out/tune_${spec%%:*}_log.txt" 2>&1
  _gpu_step "tune $spec" $? $((SECONDS - s))
  grep -vE "^ +(gemm|config|kernel)" "$out/tune_${spec%%:*}_log.txt" | tail -14 >> "$log"
done
gpu_pack all
