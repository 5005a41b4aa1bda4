#!/usr/bin/env bash
# one-off GPU run (session 6, run 5): main 5a88b84, every preset w4a16 + DeepSeek-R1 w4a4, then the Python package
set -u
o=$OUT; log=$o/a_run5.txt
export NCCL_NVLS_ENABLE=0
tar -C gpubin -xzf gpubin/bin.tar.gz
mkdir -p $o/p
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for p in qwen3-30b-a3b qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b; do
  echo "=== $p"
  timeout 90 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 1,8,128,1024,2048,16384 --check --verbose --json $o/p/${p}.json 2>&1 | grep -vE "^ +(gemm|kernel)" | tail -14
  echo "=== $p exit ${PIPESTATUS[0]}"
done
echo "=== deepseek-r1 w4a4"
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 --check --json $o/p/deepseek-r1_w4a4.json 2>&1 | tail -7
echo "=== w4a4 exit ${PIPESTATUS[0]}"
} >> $log 2>&1
FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin timeout 300 scripts/gpu-check.sh >> $log 2>&1
echo "=== python section exit $?" >> $log
cd $o && tar czf a_p.tgz p python.log 2>/dev/null; rm -rf p
