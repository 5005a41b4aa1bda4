#!/usr/bin/env bash
# Session 22, run 3 (two H200s), over gpubin/ staged from main (b4c0657: the count off the consumers and
# the overlap wherever GEMM1 runs 16-token tiles) with the trace build: FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh.
# Every GPU test, the Python package, the checkpoint round trips and the 2-GPU parallel tests and bench
# on the new kernels; traces of the decode after the count's move; --tune at 16-64 rows per expert for
# the presets with few experts (Mixtral, gpt-oss-20b, Llama-4-Scout), where the thresholds were
# interpolated from DeepSeek-R1, Qwen3 and gpt-oss-120b.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
s=$SECONDS
FP4MOE_SECTIONS="tests python checkpoint parallel" OUT=$out/check FP4MOE_PARALLEL_TIMEOUT=200 timeout 420 \
  scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python checkpoint parallel" $? $((SECONDS - s))
grep -E "^=== .* exit|passed|failed|gpu-check:" "$out/check_log.txt" | head -40 >> "$log"
grep -E "^ +[0-9]+ |^=== " "$out/check/parallel.log" 2>/dev/null | head -30 >> "$log"
gpu_trace deepseek-r1:8,128 qwen3-30b-a3b:1,8 gpt-oss-20b:8
c="BN16_C4_S4_x1_db_c4,BN32_C4_S5_x1_db_c2,BN48_C4_S5_x1_db_c2,BN64_C4_S4_x1_c2"
for spec in mixtral-8x7b:64,128,256 gpt-oss-20b:128,256,512 llama4-scout:256,512,1024; do
  s=$SECONDS
  timeout 60 gpubin/bin/fp4moe-bench --preset ${spec%%:*} --tokens ${spec#*:} --routing random \
    --tune "$out/tune_${spec%%:*}.txt" --tune-only $c > "$out/tune_${spec%%:*}.log" 2>&1
  _gpu_step "tune $spec" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |error" "$out/tune_${spec%%:*}.log" >> "$log"
done
gpu_pack all
