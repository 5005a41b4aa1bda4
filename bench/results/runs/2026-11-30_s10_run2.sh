#!/usr/bin/env bash
# GPU run (session 10, run 2): main (the kernels of session 9's run 3), the first table run with the
# torch peers on fp4moe-bench's routing (--dump-routing / --routing-dir).
# Part A: every GPU test, memcheck, racecheck (with the overlap test), the Python package.
# Part B (FP4MOE_RUN_PART=B): the README's tables: the DeepSeek-R1 sweep (w4a16, --check) with the torch
# peers, DeepSeek-R1 w4a4, every other preset (--check).
set -u
o=$OUT; part=${FP4MOE_RUN_PART:-A}; log=$o/a_run2$part.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
SECONDS=0
if [ $part = A ]; then
  FP4MOE_SECTIONS="tests memcheck python" FP4MOE_RACECHECK=1 FP4MOE_RACECHECK_TIMEOUT=240 FP4MOE_MEMCHECK_TIMEOUT=240 \
    timeout 570 scripts/gpu-check.sh > $log 2>&1
  echo "=== gpu-check exit $? ($SECONDS s)" >> $log
  cd $o && tar czf logs.tgz --exclude=a_run2A.txt --exclude=logs.tgz . && find . -type f ! -name a_run2A.txt ! -name logs.tgz -delete
else
  {
  FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 200 scripts/gpu-check.sh deepseek-r1
  echo "(sweep $SECONDS s)"; SECONDS=0
  timeout 100 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
    --check --json $o/bench_deepseek-r1_w4a4.json
  echo "=== w4a4 exit $? ($SECONDS s)"; SECONDS=0
  FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 timeout 260 scripts/gpu-check.sh qwen3-30b-a3b \
    qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
  echo "(presets $SECONDS s)"
  echo "=== end"
  } >> $log 2>&1
  cd $o && tar czf 00-json.tgz $(find . -name '*.json') 2>/dev/null; ls
fi
