#!/usr/bin/env bash
# GPU run (session 16, run 3): exp/commit-in-arm 953095f (each narrow-N arm commits its own wgmma
# group) against main 59f8b53 (FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh):
#   1. test_moe_gpu (the branch's) and memcheck on gpu-try.sh's default filter
#   2. ncu durations and DRAM throughput of both builds' GEMMs at DeepSeek-R1 T=32
#   3. A/B (3 repetitions, graph replay)
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
timeout 120 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
echo "=== test_moe_gpu exit $? ($SECONDS s)" >> $log; tail -3 $o/test_moe_gpu.txt >> $log
grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -40 >> $log
SECONDS=0
filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
  2>&1 | grep -E "SUMMARY|PASSED|FAILED" >> $log
echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)" >> $log
for b in base bin; do
  bin=gpubin/$b/fp4moe-bench
  SECONDS=0
  timeout 60 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 --section SpeedOfLight \
    $bin --preset deepseek-r1 --tokens 32 --routing random --warmup-ms 0 > $o/ncu_sol_$b.txt 2>&1
  echo "=== ncu $b exit $? ($SECONDS s)" >> $log
  grep -E "moe_gemm|SM Frequency|DRAM Throughput|Duration" $o/ncu_sol_$b.txt | sed 's/^ *//' | cut -c1-90 >> $log
done
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 timeout 330 scripts/gpu-ab.sh deepseek-r1:1,8,32,128,2048 qwen3-30b-a3b:8,128,2048 \
  gpt-oss-120b:8,128 > $o/ab_log.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $log
cat $o/ab/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf all.tgz ab ncu_sol_*.txt test_moe_gpu.txt ab_log.txt && rm -rf ab ncu_sol_*.txt test_moe_gpu.txt ab_log.txt)
