#!/usr/bin/env bash
# Session 33, run 1 (one H200): the pointer-kind checks on a GPU (test_moe_gpu's
# ForwardRefusesBuffersTheGpuCannotReach, route_gpu's and the codec's host-memory refusals, the
# one-GPU ParallelMoe refusal), every test binary, the Python package, memcheck of the new tests, and
# fp4moe-bench's validate_us (the host time of MoeLayer::validate, now with one pointer query per
# buffer) next to the stream and graph times. Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
grep -h "pageable" "$out"/check/*.txt "$out/check_log.txt" 2>/dev/null | sort | uniq -c >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
grep -E "OK \]|FAILED|PASSED" "$out/test_parallel_gpu_one.txt" | head -8 >> "$log"
GPU_SANITIZE_FILTER='*ForwardRefuses*:*ForwardRejects*:*OutOfRange*' gpu_sanitize memcheck 120 || true
mkdir -p "$out/bench"
for spec in qwen3-30b-a3b:1,8 deepseek-r1:1,8,128 gpt-oss-120b:1,8; do
  s=$SECONDS
  timeout 90 gpubin/bin/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --check \
    --json "$out/bench/bench_${spec%%:*}.json" > "$out/bench/bench_${spec%%:*}.txt" 2>&1
  _gpu_step "fp4moe-bench $spec" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ " "$out/bench/bench_${spec%%:*}.txt" >> "$log"
  grep -o '"tokens": [0-9]*\|"stream_ms": [0-9.e-]*\|"graph_ms": [0-9.e-]*\|"validate_us": [0-9.e-]*' \
    "$out/bench/bench_${spec%%:*}.json" | paste -sd' ' >> "$log"
done
gpu_pack all
