#!/usr/bin/env bash
# Runs on the GPU machine over prebuilt binaries (scripts/stage-gpu.sh copies them into gpubin/):
# all tests, compute-sanitizer memcheck on the GPU tests, and fp4moe-bench, writing logs and JSON
# under $OUT (at most 8 files come back). Usage: scripts/gpu-check.sh [bench presets...]
set -u
out=${OUT:-/tmp/fp4moe-out}
mkdir -p "$out"
bin=${FP4MOE_BIN:-gpubin}
export NCCL_NVLS_ENABLE=0
export FP4MOE_RCP_TABLE_OUT="$out/rcp_approx_table.inc"
log="$out/tests.log"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  for t in test_format test_routing test_reference test_api test_format_gpu test_routing_gpu test_moe_gpu; do
    echo "=== $t"
    start=$(date +%s)
    timeout ${FP4MOE_TEST_TIMEOUT:-300} "$bin/$t" 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -60
    echo "=== $t exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
  done
} > "$log" 2>&1
grep -E "^=== .* exit" "$log"

if [ "${FP4MOE_MEMCHECK:-1}" = 1 ]; then
  {
    for spec in "test_format_gpu:-*Exhaustive*:*MatchesHardware*" \
                "test_routing_gpu:*" \
                "test_moe_gpu:${FP4MOE_MEMCHECK_FILTER:-*deepseek*w4a16*:*gpt_oss_20b*:*Hostile*:*Rejects*:*OutOfRange*}"; do
      t=${spec%%:*}; filter=${spec#*:}
      echo "=== memcheck $t ($filter)"
      timeout 900 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/$t" --gtest_filter="$filter" 2>&1 | \
        grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid|out of bounds" | tail -8
      echo "=== memcheck $t exit ${PIPESTATUS[0]}"
    done
    filter=${FP4MOE_RACECHECK_FILTER:-*deepseek_r1_w4a16_sm90*:*Hostile*sm90*}
    echo "=== racecheck test_moe_gpu ($filter)"
    timeout 900 compute-sanitizer --tool racecheck --error-exitcode 3 "$bin/test_moe_gpu" --gtest_filter="$filter" 2>&1 | \
      grep -vE '^\[ +(RUN|OK) +\]' | head -40
    echo "=== racecheck test_moe_gpu exit ${PIPESTATUS[0]}"
  } > "$out/memcheck.log" 2>&1
  grep -E "SUMMARY|exit" "$out/memcheck.log"
fi

for preset in ${@:-deepseek-r1}; do
  timeout ${FP4MOE_BENCH_TIMEOUT:-300} stdbuf -oL "$bin/fp4moe-bench" --preset "$preset" \
    ${FP4MOE_BENCH_ARGS:---tokens 1,128,8192 --check --verbose} --json "$out/bench_${preset}.json" 2>&1 | \
    tee -a "$out/bench.log"
done
