#!/usr/bin/env bash
# GPU run (session 16, run 6): exp/tile-setup (GEMM2's BN16 tile lookup from shared memory, no
# split-K divisions when unsplit) against main (FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# scripts/stage-gpu.sh on the branch): test_moe_gpu and memcheck (the branch's), ncu GEMM2 durations of
# both builds at DeepSeek-R1 T = 8 / 32 / 128, then an A/B.
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
SECONDS=0
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 gpubin/bin/test_moe_gpu \
  --gtest_filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*' 2>&1 | grep -E "SUMMARY|PASSED|FAILED" >> $log
echo "=== memcheck exit ${PIPESTATUS[0]} ($SECONDS s)" >> $log
for T in 8 32 128; do
  for b in base bin; do
    timeout 40 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 --section SpeedOfLight \
      gpubin/$b/fp4moe-bench --preset deepseek-r1 --tokens $T --routing random --warmup-ms 0 > $o/sol_${b}_$T.txt 2>&1
    echo "=== ncu $b T=$T exit $?: $(grep -E 'Duration' $o/sol_${b}_$T.txt | awk '{printf "%s %s  ", $2, $3}')" >> $log
  done
done
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 timeout 150 scripts/gpu-ab.sh deepseek-r1:8,32,128 qwen3-30b-a3b:8,128 gpt-oss-120b:8 \
  > $o/ab_log.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $log
cat $o/ab/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf all.tgz ab ab_log.txt sol_*.txt test_moe_gpu.txt && rm -rf ab ab_log.txt sol_*.txt test_moe_gpu.txt)
