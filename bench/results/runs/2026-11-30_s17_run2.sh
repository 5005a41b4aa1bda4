#!/usr/bin/env bash
# GPU run (session 17, run 2): exp/bn16-c4 (the decode tile with four K chunks a stage, 4 stages)
# against main (FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh on the branch):
#   1. test_moe_gpu (the branch's), memcheck and racecheck
#   2. ncu GEMM durations of both builds at DeepSeek-R1 T = 1 / 512 (run 1 took T = 8 / 32 / 128)
#   3. A/B (3 repetitions, graph replay) over the token counts the decode tile serves
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
for T in 1 512; do
  for v in base bin; do
    timeout 40 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 --section SpeedOfLight \
      gpubin/$v/fp4moe-bench --preset deepseek-r1 --tokens $T --routing random --warmup-ms 0 > $o/sol_${v}_$T.txt 2>&1
    echo "=== ncu $v T=$T exit $?: $(grep -E 'Duration' $o/sol_${v}_$T.txt | awk '{printf "%s %s  ", $2, $3}')" >> $log
  done
done
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 timeout 260 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,512 qwen3-30b-a3b:1,8,128 \
  gpt-oss-120b:1,8,128 > $o/ab_log.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $log
cat $o/ab/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf all.tgz ab ab_log.txt sol_*.txt test_moe_gpu.txt memcheck.txt racecheck.txt &&
  rm -rf ab ab_log.txt sol_*.txt test_moe_gpu.txt memcheck.txt racecheck.txt)
