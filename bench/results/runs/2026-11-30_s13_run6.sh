#!/usr/bin/env bash
# GPU run (session 13, run 6). Staged on main with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# Pipeline waits again, now summed without an atomic per stage; the untraced build at the same points.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
for spec in deepseek-r1:1,8,128,2048 qwen3-30b-a3b:8,128; do
  echo "=== trace $spec" >> $o/run.txt
  timeout 100 gpubin/trace/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
    --trace --json "$o/trace_${spec%%:*}.json" 2>&1 | grep -E "^ +[0-9]+ |gemm|plan|final" >> $o/run.txt
  echo "=== untraced $spec" >> $o/run.txt
  timeout 100 gpubin/bin/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random \
    2>&1 | grep -E "^ +[0-9]+ " >> $o/run.txt
done
(cd $o && tar czf traces.tgz trace_*.json && rm trace_*.json)
