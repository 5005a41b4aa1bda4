#!/usr/bin/env bash
# GPU run (session 16, run 2), on run 1's staging (main 3076f99):
#   1. ncu source counters (executed instructions and stall samples per SASS instruction) of the real
#      GEMM1 and GEMM2 at DeepSeek-R1 T=32 and of the probe's /n8 stream cut into 32-chunk tiles with
#      the stand-in epilogue (random fill): where do the real kernels' extra instructions per byte go?
#   2. compute-sanitizer memcheck and racecheck of test_moe_gpu on main (gpu-try.sh's default filter)
set -u
o=$OUT
log=$o/run.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $log 2>&1
src="--section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight --import-source no"
prof() {  # name, ncu kernel args, then the command
  local name=$1 kargs=$2; shift 2
  SECONDS=0
  timeout 150 ncu --clock-control none $kargs --launch-count 1 $src -f -o /tmp/$name "$@" > /tmp/$name.log 2>&1
  echo "=== ncu $name exit $? ($SECONDS s)" >> $log
  { ncu --import /tmp/$name.ncu-rep --page details --print-details all
    ncu --import /tmp/$name.ncu-rep --page source --csv --print-source sass; } > $o/src_$name.txt 2>&1
}
prof gemm1_T32 "-k regex:moe_gemm_sm90 --launch-skip 20" gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 32 --routing random --warmup-ms 0
prof gemm2_T32 "-k regex:moe_gemm_sm90 --launch-skip 21" gpubin/bin/fp4moe-bench --preset deepseek-r1 --tokens 32 --routing random --warmup-ms 0
prof stream_n8_t32 "--kernel-name-base mangled -k regex:stream_loopILi4ELi6ELb1ELi8E --launch-skip 9" \
  gpubin/bin/fp4moe-decode-probe --set pipeline --reps 1 --fill random
(cd $o && tar czf src.tgz src_*.txt && rm src_*.txt)
filter='*Plan*:*HostileRouting*:*GemmOverlap*:*SplitK*:*deepseek*'
for tool in memcheck racecheck; do
  SECONDS=0
  echo "=== $tool on $filter" >> $log
  timeout 230 compute-sanitizer --tool $tool --error-exitcode 3 gpubin/bin/test_moe_gpu --gtest_filter="$filter" \
    2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 30 || /SUMMARY/' >> $log
  echo "=== $tool exit ${PIPESTATUS[0]} ($SECONDS s)" >> $log
done
