#!/usr/bin/env bash
# Nsight Compute on one forward per token count. Two passes per T, reports in $OUT:
#   profile_<preset>_<T>.txt      the sm90 GEMM kernels: speed of light, memory, warp stalls, issue,
#                                 pipes and instruction mix
#   breakdown_<preset>_<T>.txt    every kernel of the forward (routing, plan, permute, GEMMs, finalize):
#                                 duration and throughput, to see where the layer's time goes
# Clocks are left alone (--clock-control none). Expects the binaries unpacked (scripts/gpu-check.sh
# does it; or `tar -C gpubin -xzf gpubin/bin.tar.gz`).
#   stalls_<preset>_<T>.txt       with FP4MOE_PROFILE_SOURCE=1 (instead of the two above): GEMM1's warp
#                                 stall reasons, and per SASS instruction (source page, CSV) the
#                                 samples of where its warps stalled
#   breakdown_<preset>_<T>.txt    with FP4MOE_PROFILE_BREAKDOWN=1: only the every-kernel pass (fast)
#   metrics_<preset>_<T>.txt      with FP4MOE_PROFILE_METRICS=1 (instead of the above): per GEMM kernel
#                                 the utilization of the units a prefill tile can saturate (tensor
#                                 pipe, shared-memory wavefronts, L2 and DRAM throughput, issue slots)
# Usage: scripts/gpu-profile.sh PRESET T [T...]   (env FP4MOE_PROFILE_ARGS: extra fp4moe-bench args)
set -u
out=${OUT:-/tmp/fp4moe-out}
mkdir -p "$out"
if [ ! -d gpubin/bin ] && [ -f gpubin/bin.tar.gz ]; then tar -C gpubin -xzf gpubin/bin.tar.gz; fi
bash scripts/gpu-unpack-builds.sh
bin=${FP4MOE_BIN:-gpubin/bin}
preset=$1; shift
bench_args="--preset $preset --iters 1 --warmup 0 --routing random ${FP4MOE_PROFILE_ARGS:-}"
for T in "$@"; do
  rep="/tmp/prof_${preset}_${T}"
  if [ "${FP4MOE_PROFILE_METRICS:-0}" = 1 ]; then
    metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
    metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
    metrics+=,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second
    metrics+=,dram__bytes.sum.per_second,sm__inst_issued.avg.pct_of_peak_sustained_active
    metrics+=,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
    metrics+=,sm__cycles_elapsed.avg.per_second
    # 4 GEMM launches: GEMM1, its tail launch, GEMM2, its tail launch where tails run (a main tile of
    # 128 or more); otherwise GEMM1, GEMM2 and the next forward's two
    timeout 300 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 4 --metrics "$metrics" \
      "$bin/fp4moe-bench" $bench_args --tokens "$T" > "$out/metrics_${preset}_${T}.txt" 2>&1
    echo "=== ncu metrics $preset T=$T exit $?"
    grep -E "moe_gemm|__" "$out/metrics_${preset}_${T}.txt" | sed 's/^ *//' | cut -c1-150
    continue
  fi
  if [ "${FP4MOE_PROFILE_SOURCE:-0}" = 1 ]; then
    timeout 300 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 1 --import-source no \
      --section WarpStateStats --section SourceCounters -f -o "$rep.src" "$bin/fp4moe-bench" $bench_args --tokens "$T" \
      > /dev/null 2>&1
    echo "=== ncu stalls $preset T=$T exit $?"
    { ncu --import "$rep.src.ncu-rep" --page details --print-details all
      ncu --import "$rep.src.ncu-rep" --page source --csv --print-source sass; } > "$out/stalls_${preset}_${T}.txt" 2>&1
    grep -iE "stall|warp cycles" "$out/stalls_${preset}_${T}.txt" | head -40
    continue
  fi
  if [ "${FP4MOE_PROFILE_BREAKDOWN:-0}" != 1 ]; then
  timeout 300 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section InstructionStats --section ComputeWorkloadAnalysis \
    -f -o "$rep" "$bin/fp4moe-bench" $bench_args --tokens "$T" > /dev/null 2>&1
  echo "=== ncu gemm $preset T=$T exit $?"
  ncu --import "$rep.ncu-rep" --page details > "$out/profile_${preset}_${T}.txt" 2>&1
  grep -E "moe_gemm|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Cache Throughput|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Issue Slots Busy|Executed Ipc" \
    "$out/profile_${preset}_${T}.txt" | sed 's/^ *//' | cut -c1-150
  fi
  # (10 launches: one forward's plan (one kernel, or three from 16384 routed pairs), permute, GEMM1,
  # [its tail launch,] GEMM2, [its tail launch,] finalize, then the next forward's first kernels;
  # --routing random runs no routing kernel)
  timeout 300 ncu --clock-control none -k regex:'route_kernel|plan_|permute_kernel|finalize_kernel|moe_gemm_sm90' \
    --launch-count 10 --section SpeedOfLight -f -o "$rep.all" "$bin/fp4moe-bench" $bench_args --tokens "$T" > /dev/null 2>&1
  echo "=== ncu breakdown $preset T=$T exit $?"
  ncu --import "$rep.all.ncu-rep" --page details > "$out/breakdown_${preset}_${T}.txt" 2>&1
  grep -E "^  [a-z_:<>0-9A-Za-z]+.*\(|Duration|DRAM Throughput" "$out/breakdown_${preset}_${T}.txt" | sed 's/^ *//' | cut -c1-120
done
