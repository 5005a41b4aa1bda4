#!/usr/bin/env bash
# GPU run (session 13, run 5). Staged on main with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 FP4MOE_STAGE_TRACE_MORE="iltr=exp/interleave" scripts/stage-gpu.sh
# Traces with the pipeline waits (how much of their time the GEMMs' consumers wait for data and the
# producer for room), main and the interleaved K loop, at decode and T=2048.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
for b in trace iltr; do
  for spec in deepseek-r1:1,8,32,128,2048 qwen3-30b-a3b:8,128 gpt-oss-120b:8; do
    echo "=== $b $spec" >> $o/run.txt
    timeout 100 gpubin/$b/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
      --trace --json "$o/trace_${b}_${spec%%:*}.json" 2>&1 | grep -E "^ +[0-9]+ |gemm|plan|final" >> $o/run.txt
  done
done
(cd $o && tar czf traces.tgz trace_*.json && rm trace_*.json)
