#!/usr/bin/env bash
# GPU run (session 18, run 2). Staged on exp/groups-g2 with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main FP4MOE_STAGE_TRACE=1 \
#   FP4MOE_STAGE_MORE="g2ns=exp/groups-g2-ns delay=exp/tile-delay" scripts/stage-gpu.sh
#   1. test_moe_gpu of exp/groups-g2 (the decode config as 2 groups of 2 consumers); stops on failure
#   2. A/B main against groups (g2) and against groups without the stagger (g2ns) at decode
#   3. A/B main against tile-delay (consumers idle ~2 us before each tile's K loop)
#   4. main with and without --back-to-back
#   5. the trace build of exp/groups-g2 at DeepSeek-R1 T = 32 / 128
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
timeout 100 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
rc=$?
echo "=== test_moe_gpu exit $rc ($SECONDS s)" >> $log; tail -2 $o/test_moe_gpu.txt >> $log
grep -B3 -A12 "Failure\|FAILED" $o/test_moe_gpu.txt | head -40 >> $log
ab() {  # name head_bin timeout specs...
  local name=$1 bin=$2 t=$3; shift 3
  SECONDS=0
  OUT=$o/ab_$name FP4MOE_AB_REPS=${REPS:-3} FP4MOE_AB_HEAD_BIN=$bin timeout $t scripts/gpu-ab.sh "$@" > $o/ab_${name}_log.txt 2>&1
  echo "=== ab $name exit $? ($SECONDS s)" >> $log
  cat $o/ab_$name/ab/summary.md >> $log 2>/dev/null
}
if [ $rc = 0 ]; then
  ab g2 gpubin/bin/fp4moe-bench 150 deepseek-r1:8,32,128 gpt-oss-120b:8,128 qwen3-30b-a3b:8,128
  ab g2ns gpubin/g2ns/fp4moe-bench 60 deepseek-r1:8,32,128
  SECONDS=0
  timeout 40 gpubin/trace/fp4moe-bench --preset deepseek-r1 --tokens 32,128 --routing random --verbose --trace \
    --json $o/trace_deepseek.json > $o/trace_log.txt 2>&1
  echo "=== trace exit $? ($SECONDS s)" >> $log
  grep -E "^ +[0-9]+ |gemm|path" $o/trace_log.txt >> $log
fi
REPS=2 ab delay gpubin/delay/fp4moe-bench 50 deepseek-r1:32,128
REPS=2 FP4MOE_AB_BASE_BIN=gpubin/base/fp4moe-bench FP4MOE_AB_HEAD_ARGS=--back-to-back \
  ab b2b gpubin/base/fp4moe-bench 90 deepseek-r1:1,8,32,128 gpt-oss-120b:1 qwen3-30b-a3b:1
(cd $o && tar czf all.tgz ab_* trace_* test_moe_gpu.txt && rm -rf ab_* trace_* test_moe_gpu.txt)
