#!/usr/bin/env bash
# GPU run (session 12, run 1). Staged on exp/s12-plan (exp/plan-permute-128 merged with
# exp/plan-sums, on main ad93af1) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="pp128=exp/plan-permute-128" scripts/stage-gpu.sh
# gpubin/bin = exp/s12-plan, gpubin/base = main, gpubin/pp128 = exp/plan-permute-128 alone.
# 1. scripts/gpu-try.sh: test_moe_gpu, memcheck and racecheck (plan, hostile routing, overlap, split-K,
#    DeepSeek-R1 and the batch-independence test), then the A/B against main at the points the
#    fused plan-and-permute newly covers (T=16 at top-8, T=32 at top-4, T=128 at top-1) and T=1.
# 2. A shorter A/B of the combined branch against exp/plan-permute-128 alone (the plan-sums refactor).
# 3. memcheck over every test_moe_gpu test.
set -u
o=$OUT
FP4MOE_TRY_SANITIZE='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*:*Batch*' \
  FP4MOE_TRY_AB_TIMEOUT=260 scripts/gpu-try.sh deepseek-r1:1,16 qwen3-30b-a3b:16 gpt-oss-120b:32 llama4-scout:128
echo "gpu-try exit $?" >> $o/try.txt
{
  echo "=== A/B exp/s12-plan (head) against exp/plan-permute-128 (base)"; SECONDS=0
  FP4MOE_AB_REPS=2 FP4MOE_AB_BASE_BIN=gpubin/pp128/fp4moe-bench timeout 120 scripts/gpu-ab.sh deepseek-r1:16 qwen3-30b-a3b:16 > $o/ab2.txt 2>&1
  echo "exit $? ($SECONDS s)"; sed -n '/^base .* vs head/,$p' $o/ab2.txt
  (cd $o && tar czf ab2.tgz ab ab2.txt && rm -rf ab ab2.txt)
  echo "=== memcheck, every test_moe_gpu test"; SECONDS=0
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu 2>&1 \
    | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/' | tail -12
  echo "memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $o/try.txt 2>&1
