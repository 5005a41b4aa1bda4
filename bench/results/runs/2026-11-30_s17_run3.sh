#!/usr/bin/env bash
# GPU run (session 17, run 3): two more four-chunk tiles against main (staged on main with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=exp/bn32-c4 FP4MOE_STAGE_MORE="x2=exp/bn16x2-c4", so that
# gpubin/bin is main, gpubin/base BN32_C4_S3_x1_db_c4 and gpubin/x2 BN16_C2_S4_x1_db_c4):
#   1. test_moe_gpu on main (with BN16_C4_S4_x1_db_c4 merged)
#   2. ncu GEMM durations of main and bn32-c4 at DeepSeek-R1 T=512
#   3. A/B main against bn32-c4 where BN32 runs, and against bn16x2-c4 where the 2-consumer decode
#      tile runs (3 repetitions, graph replay)
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
for v in bin base; do
  timeout 40 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-skip 20 --launch-count 2 --section SpeedOfLight \
    gpubin/$v/fp4moe-bench --preset deepseek-r1 --tokens 512 --routing random --warmup-ms 0 > $o/sol_${v}_512.txt 2>&1
  echo "=== ncu $v T=512 exit $?: $(grep -E 'Duration' $o/sol_${v}_512.txt | awk '{printf "%s %s  ", $2, $3}')" >> $log
done
SECONDS=0
OUT=$o/ab32 FP4MOE_AB_REPS=3 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/base/fp4moe-bench \
  timeout 170 scripts/gpu-ab.sh deepseek-r1:512,4096 qwen3-30b-a3b:256 gpt-oss-120b:512 > $o/ab32_log.txt 2>&1
echo "=== ab bn32-c4 exit $? ($SECONDS s)" >> $log
cat $o/ab32/ab/summary.md >> $log 2>/dev/null
SECONDS=0
OUT=$o/abx2 FP4MOE_AB_REPS=3 FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/x2/fp4moe-bench \
  timeout 150 scripts/gpu-ab.sh qwen3-30b-a3b:1,2,4 gpt-oss-120b:1,2 llama4-scout:1,2 mixtral-8x7b:1 > $o/abx2_log.txt 2>&1
echo "=== ab bn16x2-c4 exit $? ($SECONDS s)" >> $log
cat $o/abx2/ab/summary.md >> $log 2>/dev/null
(cd $o && tar czf all.tgz ab32 abx2 ab32_log.txt abx2_log.txt sol_*.txt test_moe_gpu.txt &&
  rm -rf ab32 abx2 ab32_log.txt abx2_log.txt sol_*.txt test_moe_gpu.txt)
