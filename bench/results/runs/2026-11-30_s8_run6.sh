#!/usr/bin/env bash
# GPU run (session 8, run 6): GEMM1's warp stall samples per SASS instruction (ncu source counters)
# at DeepSeek-R1 T=8 (BN16, decode) and T=2048 (BN80, mid range), main's kernels.
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
FP4MOE_PROFILE_SOURCE=1 timeout 280 scripts/gpu-profile.sh deepseek-r1 8 2048 > $o/a_run6.txt 2>&1
echo "=== exit $?" >> $o/a_run6.txt
cd $o && gzip -9 stalls_*.txt; ls -la
