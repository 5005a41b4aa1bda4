#!/usr/bin/env bash
# Session 45, prepared (NOT RUN in session 45: its device time was spent on runs 1-4): the first GPU
# run of session 45's changes after those runs, ~2 minutes. Stage at the commit to validate with
#   FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu test_parallel_gpu" FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh
# What changed without a GPU run:
# - src/gemm/sm90/moe_gemm_sm90.cuh split into traits.cuh / scheduler.cuh / consumer.cuh (the GEMM
#   cubins were byte-identical here, so test_moe_gpu is a formality for it);
# - test_moe_gpu's new check: LayerOptions::path from a cast integer is refused;
# - fp4moe-bench: blocks of whole rotations, the output poisoned on the layer's stream, --check's
#   NaN scan of the whole output, its graph-replay bit comparison after the timing and, with
#   --routing model, the GPU router against route_cpu bit for bit (DeepSeek-V3's correction bias
#   included); JSON null check fields without --check.
# - The expert-parallel config estimate (rows per local expert; tokens_routed_here for alltoall):
#   test_parallel_gpu where two GPUs are lent (it skips on one).
source scripts/gpu-lib.sh
gpu_init
gpu_tests || { gpu_pack all; exit 1; }
for spec in "deepseek-r1:model:1,8,128" "qwen3-30b-a3b:model:1,16,2048" "gpt-oss-20b:model:1,8" \
    "llama4-scout:model:1,8" "mixtral-8x7b:random:8,128" "deepseek-r1:random:8"; do
  IFS=: read -r preset routing tokens <<< "$spec"
  s=$SECONDS
  timeout 90 gpubin/bin/fp4moe-bench --preset "$preset" --routing "$routing" --tokens "$tokens" --check --verbose \
    --json "$out/validate_${preset}_${routing}.json" > "$out/validate_${preset}_${routing}.txt" 2>&1
  _gpu_step "fp4moe-bench --check, $preset, --routing $routing, T=$tokens" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |check:" "$out/validate_${preset}_${routing}.txt" >> "$log"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("json ok:", [(r["T"], r["check_pass"], r["check_error"], r["check_worst_column_error"], r["check_note"]) for r in d["rows"]])' \
    "$out/validate_${preset}_${routing}.json" >> "$log" 2>&1
done
# w4a4: the column bound's margin (session 46 added check_worst_column_error)
s=$SECONDS
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128 --check \
  --json "$out/validate_w4a4.json" > "$out/validate_w4a4.txt" 2>&1
_gpu_step "fp4moe-bench --check, deepseek-r1 w4a4, T=1,8,128" $? $((SECONDS - s))
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("w4a4 json:", [(r["T"], r["check_pass"], r["check_error"], r["check_worst_column_error"], r["check_note"]) for r in d["rows"]])' \
  "$out/validate_w4a4.json" >> "$log" 2>&1
# Without --check the JSON's check fields are null
timeout 60 gpubin/bin/fp4moe-bench --preset qwen3-30b-a3b --tokens 8 --json "$out/nocheck.json" > /dev/null 2>&1
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["rows"][0]; print("no --check:", r["check_pass"], r["check_error"], r["check_worst_column_error"])' \
  "$out/nocheck.json" >> "$log" 2>&1
if [ -x gpubin/bin/test_parallel_gpu ]; then
  s=$SECONDS
  timeout 120 gpubin/bin/test_parallel_gpu > "$out/test_parallel_gpu.txt" 2>&1
  _gpu_step "test_parallel_gpu (skips on one GPU)" $? $((SECONDS - s))
  grep -E "PASSED|FAILED|SKIPPED" "$out/test_parallel_gpu.txt" | head -20 >> "$log"
fi
gpu_pack all
