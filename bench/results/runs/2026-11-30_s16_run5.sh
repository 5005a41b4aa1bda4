#!/usr/bin/env bash
# GPU run (session 16, run 5): main 0b7a037 (commit-in-arm) against session 15's table commit
# 9ca9064 on one H200 (run 4's H200 ran main 5-7% slower at T = 8-32 than session 15's ran 9ca9064),
# then source-level ncu of main's GEMM1 and GEMM2 at DeepSeek-R1 T=32 and racecheck on main.
# Staged at main: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=9ca9064 scripts/stage-gpu.sh
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
OUT=$o/ab FP4MOE_AB_REPS=3 timeout 240 scripts/gpu-ab.sh deepseek-r1:1,8,32,128 qwen3-30b-a3b:8,128 \
  gpt-oss-120b:8,128 > $o/ab_log.txt 2>&1
echo "=== ab exit $? ($SECONDS s)" >> $log
cat $o/ab/ab/summary.md >> $log 2>/dev/null
src="--section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight --import-source no"
for g in 1 2; do
  SECONDS=0
  timeout 60 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip $((19 + g)) --launch-count 1 $src \
    -f -o /tmp/gemm${g} gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 32 --routing random --warmup-ms 0 > /dev/null 2>&1
  echo "=== ncu gemm$g exit $? ($SECONDS s)" >> $log
  { ncu --import /tmp/gemm${g}.ncu-rep --page details --print-details all
    ncu --import /tmp/gemm${g}.ncu-rep --page source --csv --print-source sass; } > $o/src_gemm${g}_T32.txt 2>&1
done
filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
SECONDS=0
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
  2>&1 | grep -E "SUMMARY|PASSED|FAILED" >> $log
echo "=== racecheck exit ${PIPESTATUS[0]} ($SECONDS s)" >> $log
(cd $o && tar czf all.tgz ab ab_log.txt src_gemm*_T32.txt && rm -rf ab ab_log.txt src_gemm*_T32.txt)
