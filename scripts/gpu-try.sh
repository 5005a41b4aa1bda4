#!/usr/bin/env bash
# A prepared branch in one device call, as sessions 10-11 ran them by hand: stage on the branch with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main [FP4MOE_STAGE_TRACE=1] scripts/stage-gpu.sh
# then run on the GPU machine, from the repository root:
#   scripts/gpu-try.sh deepseek-r1:1,8,128 qwen3-30b-a3b:1,8 ...     (the A/B's preset:tokens)
# Steps, each logged to $OUT/try.txt with its time and exit status:
#   1. every test of gpubin/bin/test_moe_gpu (the branch's); a failure stops here, with its output;
#   2. compute-sanitizer memcheck and racecheck on FP4MOE_TRY_SANITIZE (a gtest filter, default the
#      plan, routing, overlap and DeepSeek-R1 tests; "none" skips them);
#   3. with a trace build staged (gpubin/trace), its kernel timeline at FP4MOE_TRY_TRACE (default
#      "deepseek-r1:1,8 qwen3-30b-a3b:1"), JSON in $OUT/traces.tgz;
#   4. scripts/gpu-ab.sh on the arguments (FP4MOE_AB_* as there; FP4MOE_AB_REPS default 3 here),
#      its files in $OUT/ab.tgz and its table at the end of try.txt.
# FP4MOE_TRY_AB_TIMEOUT (default 280 s) bounds step 4; the device tool's limit is 600 s a call.
# Exits non-zero when a step failed.
set -u
out=${OUT:-/tmp/fp4moe-out}
mkdir -p "$out"
log=$out/try.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
status=0
step() { echo "=== $1 exit $2 ($3 s)" >> "$log"; [ "$2" = 0 ] || status=1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> "$log" 2>&1

SECONDS=0
timeout 240 gpubin/bin/test_moe_gpu > "$out/test_moe_gpu.txt" 2>&1
rc=$?
tail -3 "$out/test_moe_gpu.txt" >> "$log"
step "test_moe_gpu" $rc $SECONDS
if [ $rc != 0 ]; then
  grep -B3 -A12 "Failure\|FAILED" "$out/test_moe_gpu.txt" | head -80 >> "$log"
  exit 1
fi

filter=${FP4MOE_TRY_SANITIZE:-*Plan*:*HostileRouting*:*GemmOverlap*AlsoBackToBack*:*SplitK*:*deepseek*}
if [ "$filter" != none ]; then
  for tool in memcheck racecheck; do
    SECONDS=0
    echo "=== $tool on $filter" >> "$log"
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
      2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/' >> "$log"
    step "$tool" "${PIPESTATUS[0]}" $SECONDS
  done
fi

if [ -x gpubin/trace/fp4moe-bench ]; then
  for spec in ${FP4MOE_TRY_TRACE:-deepseek-r1:1,8 qwen3-30b-a3b:1}; do
    SECONDS=0
    echo "=== trace ${spec}" >> "$log"
    timeout 90 gpubin/trace/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
      --trace --json "$out/trace_${spec%%:*}.json" 2>&1 | tail -n 40 >> "$log"
    step "trace ${spec}" "${PIPESTATUS[0]}" $SECONDS
  done
  (cd "$out" && ls trace_*.json > /dev/null 2>&1 && tar czf traces.tgz trace_*.json && rm trace_*.json)
fi

if [ $# -gt 0 ]; then
  SECONDS=0
  FP4MOE_AB_REPS=${FP4MOE_AB_REPS:-3} timeout "${FP4MOE_TRY_AB_TIMEOUT:-280}" scripts/gpu-ab.sh "$@" > "$out/ab.txt" 2>&1
  rc=$?
  step "A/B $*" $rc $SECONDS
  # (a cut A/B leaves its JSON files: bench/ab_summary.py "$out/ab" on them makes the table)
  sed -n '/^base .* vs head/,$p' "$out/ab.txt" >> "$log"
  (cd "$out" && tar czf ab.tgz ab ab.txt && rm -rf ab ab.txt)
fi
exit $status
