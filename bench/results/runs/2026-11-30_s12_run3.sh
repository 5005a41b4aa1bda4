#!/usr/bin/env bash
# GPU run (session 12, run 3). Staged on exp/direct-t1 (76476ad, on main 4774f36) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# gpubin/bin = exp/direct-t1, gpubin/base = main, gpubin/trace = exp/direct-t1 traced.
# 1. scripts/gpu-try.sh: test_moe_gpu, memcheck and racecheck (the direct-GEMM1 test, plan, hostile
#    routing, batch independence), the kernel timelines (DeepSeek-R1 T=1,8, Qwen3-30B T=1), then the
#    A/B against main at T=1 (where direct GEMM1 applies; Llama-4 weights its input, so not there)
#    and DeepSeek-R1 T=8 (a control: it does not apply). Run 2 of this session ran the first form
#    (direct GEMM1 without the overlap): its new test failed on a test bug (a top-2 layer with both
#    ids out of range has a zero output), so only step 2 ran.
# 2. The same binary with and without direct GEMM1 (--no-direct-gemm1 as the base).
# 3. memcheck over every test_moe_gpu test.
set -u
o=$OUT
FP4MOE_TRY_SANITIZE='*Direct*:*Plan*:*HostileRouting*:*Batch*' FP4MOE_TRY_AB_TIMEOUT=240 \
  scripts/gpu-try.sh deepseek-r1:1,8 qwen3-30b-a3b:1 gpt-oss-120b:1 mixtral-8x7b:1 qwen3-235b-a22b:1
echo "gpu-try exit $?" >> $o/try.txt
{
  echo "=== A/B direct GEMM1 (head) against --no-direct-gemm1 (base), the same binary"; SECONDS=0
  FP4MOE_AB_REPS=2 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_BASE_ARGS=--no-direct-gemm1 \
    timeout 130 scripts/gpu-ab.sh deepseek-r1:1 qwen3-30b-a3b:1 gpt-oss-120b:1 > $o/ab2.txt 2>&1
  echo "exit $? ($SECONDS s)"; sed -n '/^base .* vs head/,$p' $o/ab2.txt
  (cd $o && tar czf ab2.tgz ab ab2.txt && rm -rf ab ab2.txt)
  echo "=== memcheck, every test_moe_gpu test"; SECONDS=0
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu 2>&1 \
    | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/' | tail -12
  echo "memcheck exit ${PIPESTATUS[0]} ($SECONDS s)"
} >> $o/try.txt 2>&1
