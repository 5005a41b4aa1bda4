#!/usr/bin/env bash
# GPU run (session 8, run 4): main's whole check: every GPU test, memcheck (now with the tail and
# plan tests), racecheck (now with the tail tests), the Python package (build, GPU tests, example).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
SECONDS=0
FP4MOE_SECTIONS="tests memcheck python" FP4MOE_RACECHECK=1 FP4MOE_RACECHECK_TIMEOUT=240 FP4MOE_MEMCHECK_TIMEOUT=240 \
  timeout 580 scripts/gpu-check.sh > $o/a_run4.txt 2>&1
echo "=== gpu-check exit $? ($SECONDS s)" >> $o/a_run4.txt
cd $o && ls && tar czf logs.tgz --exclude=a_run4.txt --exclude=logs.tgz . && find . -type f ! -name a_run4.txt ! -name logs.tgz -delete
