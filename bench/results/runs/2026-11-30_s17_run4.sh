#!/usr/bin/env bash
# GPU run (session 17, run 4): main with both four-chunk decode tiles (BN16_C4_S4_x1_db_c4 and
# BN16_C2_S4_x1_db_c4; staged at main with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh):
# test_moe_gpu, memcheck and racecheck on tests that run the 2-consumer tile (every config, direct
# GEMM1, split-K, Qwen3-30B), then the README's tables as session 16's run 4: the DeepSeek-R1 sweep
# with --check and the torch peers, DeepSeek-R1 w4a4, every other preset with --check.
set -u
o=$OUT; log=$o/a_run4.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
{
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -4
echo "=== test_moe_gpu exit ${PIPESTATUS[0]} ($SECONDS s)"
filter='*EveryCompiledSm90Config*:*DirectGemm1*:*SplitKMatches*:*qwen3_30b*'
for tool in memcheck racecheck; do
  SECONDS=0
  timeout 130 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
    > $o/$tool.txt 2>&1
  echo "=== $tool exit $? ($SECONDS s)"
  grep -E "SUMMARY|PASSED|FAILED|hazard" $o/$tool.txt | head -5
done
SECONDS=0
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 150 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"; SECONDS=0
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
  --check --json $o/bench_deepseek-r1_w4a4.json
echo "=== w4a4 exit $? ($SECONDS s)"; SECONDS=0
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 timeout 240 scripts/gpu-check.sh qwen3-30b-a3b \
  qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
echo "(presets $SECONDS s)"
} >> $log 2>&1
(cd $o && tar czf 00-json.tgz $(find . -name '*.json') memcheck.txt racecheck.txt 2>/dev/null &&
  find . -name '*.json' -delete && rm -f memcheck.txt racecheck.txt)
ls $o
