#!/usr/bin/env bash
# GPU run (session 13, run 9). Staged on exp/dyn-gemm2-wide with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="dyn=exp/dyn-gemm2" scripts/stage-gpu.sh
# gpubin/bin = dynamic GEMM2 with the overlap gate at 40 rounds, dyn = dynamic GEMM2 with main's gate.
# test_moe_gpu and memcheck/racecheck on the overlap tests (bin), then the A/Bs against main.
set -u
o=$OUT
FP4MOE_TRY_SANITIZE='*GemmOverlap*:*deepseek*:*Direct*' FP4MOE_TRY_AB_TIMEOUT=300 \
  scripts/gpu-try.sh deepseek-r1:8,16,32,128 qwen3-30b-a3b:8,32,64,128 gpt-oss-120b:8,16,128 llama4-scout:16,128
echo "gpu-try exit $?" >> $o/try.txt
SECONDS=0
echo "=== A/B dyn (main's gate) against main" >> $o/try.txt
FP4MOE_AB_REPS=3 FP4MOE_AB_HEAD_BIN=gpubin/dyn/fp4moe-bench OUT=$o/dyn timeout 150 scripts/gpu-ab.sh \
  qwen3-30b-a3b:8 gpt-oss-120b:8 llama4-scout:8,16 > $o/ab_dyn.txt 2>&1
echo "exit $? ($SECONDS s)" >> $o/try.txt
sed -n '/^base .* vs head/,$p' $o/ab_dyn.txt >> $o/try.txt
(cd $o && tar czf ab_dyn.tgz dyn ab_dyn.txt && rm -rf dyn ab_dyn.txt)
