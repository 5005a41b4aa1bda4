#!/usr/bin/env bash
# Unpacks the extra builds scripts/stage-gpu.sh stores gzipped (gpubin/NAME/fp4moe-bench.gz, and
# gpubin/NAME/test_moe_gpu.gz with FP4MOE_STAGE_MORE_TESTS=1) next to themselves, once. Run from the
# repository root by the GPU scripts.
for z in gpubin/*/fp4moe-bench.gz gpubin/*/test_moe_gpu.gz; do
  if [ -e "$z" ] && [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi
done
exit 0
