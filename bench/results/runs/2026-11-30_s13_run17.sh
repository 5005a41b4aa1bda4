#!/usr/bin/env bash
# GPU run (session 13, run 17). Staged on main with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
# test_moe_gpu after its set-up helper (a test-only change).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
timeout 150 gpubin/bin/test_moe_gpu > $o/test_moe_gpu.txt 2>&1
echo "exit $?" >> $o/test_moe_gpu.txt
