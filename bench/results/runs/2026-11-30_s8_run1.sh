#!/usr/bin/env bash
# GPU run (session 8, run 1): main + exp/plan-multi-cta + exp/next-tile (gpubin/bin, branch
# exp/s8-both) through every test_moe_gpu test and racecheck (the stmatrix epilogue), then A/Bs
# against main (gpubin/base) of each candidate alone (gpubin/pm, gpubin/nt) and of both (gpubin/bin).
# Part A (this call): tests, racecheck, the plan A/B. Part B: FP4MOE_RUN_PART=B.
set -u
o=$OUT; part=${FP4MOE_RUN_PART:-A}; log=$o/a_run1$part.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
ab() {  # name head_bin specs...
  local name=$1 head=$2; shift 2
  echo "=== A/B $name: $head against gpubin/base"
  FP4MOE_AB_HEAD_BIN=$head FP4MOE_AB_REPS=2 timeout 280 scripts/gpu-ab.sh "$@"
  (cd $o && mv ab ab_$name && tar czf ab_$name.tgz ab_$name && rm -rf ab_$name)
}
if [ $part = A ]; then
  {
  echo "=== test_moe_gpu (all)"; SECONDS=0
  timeout 240 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1; rc=$?
  tail -3 $o/test_moe_gpu.txt; echo "=== exit $rc ($SECONDS s)"
  [ $rc != 0 ] && grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -80
  } >> $log 2>&1
  grep -q "=== exit 0" $log || exit 1
  {
  echo "=== racecheck (stmatrix epilogue, tails, next-tile)"; SECONDS=0
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
    --gtest_filter='*TailTilesGive*:*deepseek_r1_w4a16_sm90*' 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/'
  echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)"
  SECONDS=0; ab pm gpubin/pm/fp4moe-bench qwen3-30b-a3b:16384 deepseek-r1:2048,8192; echo "($SECONDS s)"
  echo "=== end"
  } >> $log 2>&1
else
  {
  SECONDS=0; ab nt gpubin/nt/fp4moe-bench deepseek-r1:1,8,128 qwen3-30b-a3b:8,128 gpt-oss-120b:8,128; echo "($SECONDS s)"
  SECONDS=0; ab both gpubin/bin/fp4moe-bench deepseek-r1:8,128,8192 qwen3-30b-a3b:128,16384; echo "($SECONDS s)"
  # SM clock and power while fp4moe-bench measures its ceilings (cuBLAS 8192^3 x 13) and then
  # DeepSeek-R1 T=8192: is the layer's clock under sustained load below the burst's?
  echo "=== clocks: nvidia-smi every 20 ms around fp4moe-bench deepseek-r1 T=8192 --iters 400"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 20 > $o/smi.csv 2>&1 & smi=$!
  sleep 1; date +%T.%N
  gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 8192 --iters 400 2>&1 | \
    while IFS= read -r l; do echo "$(date +%T.%N) $l"; done
  sleep 1; kill $smi; wc -l $o/smi.csv
  echo "=== end"
  } >> $log 2>&1
fi
