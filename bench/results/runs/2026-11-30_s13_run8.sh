#!/usr/bin/env bash
# GPU run (session 13, run 8). Staged on main with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# 1. Traces with the consumers' K-loop share. 2. ncu (memory and clocks) on the real BN16 GEMM1 at
# DeepSeek-R1 T=8 and on the pipeline probe's long stream with decode and MMAs, side by side.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
for spec in deepseek-r1:1,8,128 qwen3-30b-a3b:8 gpt-oss-120b:8; do
  echo "=== trace $spec" >> $o/run.txt
  timeout 100 gpubin/trace/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
    --trace 2>&1 | grep -E "^ +[0-9]+ |gemm" >> $o/run.txt
done
metrics=sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
SECONDS=0
timeout 150 ncu --kernel-name-base mangled -k 'regex:moe_gemm_sm90_kernelINS0_10Sm90TraitsILi16ELi4ELi6ELi1ELb1ELb1ELi2EEELb0E' \
  --launch-skip 20 --launch-count 1 --metrics $metrics \
  gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 8 --routing random --warmup-ms 0 > $o/ncu_gemm1_T8.txt 2>&1
echo "=== ncu gemm1 exit $? ($SECONDS s)" >> $o/run.txt
SECONDS=0
timeout 120 ncu --kernel-name-base mangled -k 'regex:stream_loopILi4ELi6ELb1E' --launch-skip 3 --launch-count 1 \
  --metrics $metrics gpubin/bin/fp4moe-decode-probe --iters 2000 --reps 1 > $o/ncu_stream.txt 2>&1
echo "=== ncu stream exit $? ($SECONDS s)" >> $o/run.txt
grep -E "moe_gemm|stream_loop|sm__|dram__|lts__|smsp__|gpu__" $o/ncu_gemm1_T8.txt $o/ncu_stream.txt | sed 's/  */ /g' >> $o/run.txt
