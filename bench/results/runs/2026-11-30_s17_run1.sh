#!/usr/bin/env bash
# GPU run (session 17, run 1). Staged on exp/setup-both (exp/gemm2-setup2 + exp/gemm1-shared-tables +
# main) with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="c4=exp/bn16-c4":
#   1. test_moe_gpu (setup-both's), memcheck and racecheck (the shared-memory tile tables of main's
#      GEMM2 and the branch's GEMM1 under racecheck for the first time)
#   2. --clocks on main: SM clock and power over the timed replays at DeepSeek-R1 T = 8 / 32 / 128,
#      the same without --clocks and with --warmup-ms 0
#   3. ncu GEMM1 / GEMM2 durations of main, setup-both and bn16-c4 at T = 8 / 32 / 128
#   4. A/B main against setup-both (3 repetitions, graph replay)
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
timeout 100 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
echo "=== test_moe_gpu exit $? ($SECONDS s)" >> $log; tail -2 $o/test_moe_gpu.txt >> $log
grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -40 >> $log
filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
for tool in memcheck racecheck; do
  SECONDS=0
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
    > $o/$tool.txt 2>&1
  echo "=== $tool exit $? ($SECONDS s)" >> $log
  grep -E "SUMMARY|PASSED|FAILED|hazard" $o/$tool.txt | head -5 >> $log
done
b=gpubin/base/fp4moe-bench
for mode in clocks plain cold; do
  SECONDS=0
  case $mode in
    clocks) extra="--clocks" ;;
    plain) extra="" ;;
    cold) extra="--clocks --warmup-ms 0" ;;
  esac
  timeout 60 $b --preset deepseek-r1 --routing random --tokens 8,32,128 --iters 400 $extra \
    --json $o/clk_$mode.json > $o/clk_$mode.txt 2>&1
  echo "=== bench $mode exit $? ($SECONDS s)" >> $log
  grep -vE "^\s*$" $o/clk_$mode.txt | tail -12 >> $log
done
for T in 8 32 128; do
  for v in base bin c4; do
    timeout 40 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 --section SpeedOfLight \
      gpubin/$v/fp4moe-bench --preset deepseek-r1 --tokens $T --routing random --warmup-ms 0 > $o/sol_${v}_$T.txt 2>&1
    echo "=== ncu $v T=$T exit $?: $(grep -E 'Duration' $o/sol_${v}_$T.txt | awk '{printf "%s %s  ", $2, $3}')" >> $log
  done
done
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 timeout 170 scripts/gpu-ab.sh deepseek-r1:8,32,128 qwen3-30b-a3b:8,128 gpt-oss-120b:8 \
  > $o/ab_log.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $log
cat $o/ab/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf all.tgz ab ab_log.txt sol_*.txt clk_* test_moe_gpu.txt memcheck.txt racecheck.txt &&
  rm -rf ab ab_log.txt sol_*.txt clk_* test_moe_gpu.txt memcheck.txt racecheck.txt)
