#!/usr/bin/env bash
# GPU run (session 7, run 8): the Python package on main (build there, pytest GPU and CPU, the example).
set -u
FP4MOE_SECTIONS=python timeout 300 scripts/gpu-check.sh > $OUT/a_run8.txt 2>&1
cp $OUT/python.log $OUT/python_full.log 2>/dev/null
echo "=== end" >> $OUT/a_run8.txt
