#!/usr/bin/env bash
# GPU run (session 13, run 1). Staged on main with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# 1. fp4moe-decode-probe: the decode K loop alone (full / decode / mma / interleave; 1-8 consumer
#    warpgroups; N = 8/16/32). 2. ncu on its 4-warpgroup N=16 variants (pipes, issue, stalls).
# 3. The kernel timelines with the new words (last CTA start, first CTA end) at DeepSeek-R1 T=1, 8
#    and Qwen3-30B T=1.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
log=$o/run.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
SECONDS=0
echo "=== probe" >> $log
timeout 120 gpubin/bin/fp4moe-decode-probe --iters 20000 --reps 7 >> $log 2>&1
echo "=== probe exit $? ($SECONDS s)" >> $log
SECONDS=0
timeout 240 ncu --kernel-name-base mangled -k 'regex:decode_loopILi4ELi[0-3]ELi16E' --launch-count 12 \
  --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats \
  --section SpeedOfLight gpubin/bin/fp4moe-decode-probe --iters 4000 --reps 1 > $o/ncu_probe.txt 2>&1
echo "=== ncu probe exit $? ($SECONDS s)" >> $log
for spec in deepseek-r1:1,8 qwen3-30b-a3b:1; do
  SECONDS=0
  echo "=== trace $spec" >> $log
  timeout 90 gpubin/trace/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
    --trace --json "$o/trace_${spec%%:*}.json" 2>&1 | tail -n 30 >> $log
  echo "=== trace exit $? ($SECONDS s)" >> $log
done
