#!/usr/bin/env bash
# Unpacks the extra builds scripts/stage-gpu.sh stores gzipped (gpubin/NAME/fp4moe-bench.gz) next to
# themselves, once. Run from the repository root by the GPU scripts.
for z in gpubin/*/fp4moe-bench.gz; do
  if [ -e "$z" ] && [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi
done
exit 0
