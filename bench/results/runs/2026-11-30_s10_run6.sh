#!/usr/bin/env bash
# GPU run (session 10, run 6): main. How busy is the tensor pipe in the BN16 decode GEMMs
# (DeepSeek-R1 T=8)? If the m64n16k16 wgmma were near its pipe's limit, a narrower tile (N=8)
# would be the next lever; if not, the decode's issue rate stays the limit.
set -u
o=$OUT; log=$o/a_run6.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
FP4MOE_PROFILE_METRICS=1 timeout 200 scripts/gpu-profile.sh deepseek-r1 8
m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
m+=,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
m+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
m+=,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active
m+=,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
m+=,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
m+=,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active
m+=,smsp__issue_active.avg.pct_of_peak_sustained_active
echo "=== pipes"
timeout 150 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 2 --metrics "$m" \
  gpubin/bin/fp4moe-bench --preset deepseek-r1 --iters 1 --warmup 0 --routing random --tokens 8 2>&1 | \
  grep -E "moe_gemm|__|ERR|rror" | sed 's/^ *//' | cut -c1-160
echo "=== pipes exit ${PIPESTATUS[0]}"
} > $log 2>&1
