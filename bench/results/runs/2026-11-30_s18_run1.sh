#!/usr/bin/env bash
# GPU run (session 18, run 1). Staged on exp/try1 (exp/narrow-1round + exp/bn16x2-s8c4) with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE=1 \
#   FP4MOE_STAGE_MORE="narrow=exp/narrow-1round s8=exp/bn16x2-s8c4" scripts/stage-gpu.sh
#   1. test_moe_gpu of exp/try1 (both changes: the narrowed T = 1 / 6 forwards run the 8-stage tile)
#   2. A/B main against exp/narrow-1round at T = 1, 2, 4 (3 repetitions, graph replay)
#   3. A/B main against exp/bn16x2-s8c4 where the 2-consumer tile runs
#   4. main's DeepSeek-R1 T=8 with --clocks at --iters 50 and 400 (graph against stream)
#   5. the trace build's timeline at DeepSeek-R1 T = 32 / 128 (consumer K-loop time against tile time)
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
OUT=$o/abn FP4MOE_AB_REPS=3 FP4MOE_AB_HEAD_BIN=gpubin/narrow/fp4moe-bench \
  timeout 200 scripts/gpu-ab.sh deepseek-r1:1,2,4 gpt-oss-120b:1,2,4 llama4-scout:1,2,4 mixtral-8x7b:1,2,4 \
  qwen3-30b-a3b:1,2,4 > $o/abn_log.txt 2>&1
echo "=== ab narrow-1round exit $? ($SECONDS s)" >> $log
cat $o/abn/ab/summary.md >> $log 2>/dev/null
SECONDS=0
OUT=$o/abs8 FP4MOE_AB_REPS=3 FP4MOE_AB_HEAD_BIN=gpubin/s8/fp4moe-bench \
  timeout 160 scripts/gpu-ab.sh llama4-scout:1,2 mixtral-8x7b:1 gpt-oss-120b:1 qwen3-30b-a3b:1,2 > $o/abs8_log.txt 2>&1
echo "=== ab bn16x2-s8c4 exit $? ($SECONDS s)" >> $log
cat $o/abs8/ab/summary.md >> $log 2>/dev/null
for it in 50 400 50; do
  SECONDS=0
  timeout 60 gpubin/base/fp4moe-bench --preset deepseek-r1 --tokens 8 --routing random --clocks --iters $it \
    > $o/clocks_t8_iters$it.txt 2>&1
  echo "=== clocks T=8 iters $it exit $? ($SECONDS s)" >> $log
  grep -iE "graph|stream|clock|power|MHz" $o/clocks_t8_iters$it.txt | head -12 >> $log
done
SECONDS=0
timeout 90 gpubin/trace/fp4moe-bench --preset deepseek-r1 --tokens 32,128 --routing random --verbose --trace \
  --json $o/trace_deepseek.json > $o/trace_log.txt 2>&1
echo "=== trace exit $? ($SECONDS s)" >> $log
tail -60 $o/trace_log.txt >> $log
(cd $o && tar czf all.tgz abn abs8 abn_log.txt abs8_log.txt clocks_*.txt trace_* test_moe_gpu.txt &&
  rm -rf abn abs8 abn_log.txt abs8_log.txt clocks_*.txt trace_* test_moe_gpu.txt)
