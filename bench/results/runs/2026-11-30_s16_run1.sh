#!/usr/bin/env bash
# GPU run (session 16, run 1), staged on main 3076f99 with exp/narrow-bn128-112 (98dde05 rebased)
# as gpubin/b128 (FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="b128=exp/narrow-bn128-112" scripts/stage-gpu.sh):
#   1. test_moe_gpu on main (its every-config test now runs T = 70 and 76 too)
#   2. the pipeline probe with one repeated byte and with random bits (--fill)
#   3. ncu, each kernel of one forward (duration, DRAM throughput, clock): DeepSeek-R1 T = 8 / 32 / 128,
#      Qwen3-30B T=8
#   4. ncu sections: the real GEMM1 and GEMM2 at DeepSeek-R1 T=32 and the probe's /n8 stream (random fill)
#   5. A/B main against exp/narrow-bn128-112 at DeepSeek-R1 T = 4096 / 8192, Qwen3-30B T=2048
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
for f in const random; do
  SECONDS=0
  timeout 60 gpubin/bin/fp4moe-decode-probe --set pipeline --fill $f > $o/probe_pipeline_$f.txt 2>&1
  echo "=== probe pipeline $f exit $? ($SECONDS s)" >> $log
done
SECONDS=0
FP4MOE_PROFILE_BREAKDOWN=1 timeout 150 scripts/gpu-profile.sh deepseek-r1 8 32 128 >> $log 2>&1
FP4MOE_PROFILE_BREAKDOWN=1 timeout 60 scripts/gpu-profile.sh qwen3-30b-a3b 8 >> $log 2>&1
echo "=== breakdowns ($SECONDS s)" >> $log
secs="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
SECONDS=0
timeout 100 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 \
  $secs gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 32 --routing random --warmup-ms 0 > $o/ncu_gemms_T32.txt 2>&1
echo "=== ncu gemms T=32 exit $? ($SECONDS s)" >> $log
SECONDS=0
timeout 80 ncu --clock-control none --kernel-name-base mangled -k 'regex:stream_loopILi4ELi6ELb1ELi8E' --launch-skip 3 \
  --launch-count 1 $secs gpubin/bin/fp4moe-decode-probe --set pipeline --reps 1 --fill random > $o/ncu_stream_n8.txt 2>&1
echo "=== ncu stream exit $? ($SECONDS s)" >> $log
SECONDS=0
OUT=$o/ab1 FP4MOE_AB_REPS=3 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/b128/fp4moe-bench \
  timeout 220 scripts/gpu-ab.sh deepseek-r1:4096,8192 qwen3-30b-a3b:2048 > $o/ab_b128.txt 2>&1
echo "=== ab b128 exit $? ($SECONDS s)" >> $log
cat $o/ab1/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf ab1.tgz ab1 && rm -rf ab1)
