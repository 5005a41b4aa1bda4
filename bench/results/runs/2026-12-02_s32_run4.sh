#!/usr/bin/env bash
# Session 32, run 4 (one H200): run 3's one failure, test_weights_as_torch_tensors in pytest
# test_gpu.py (a global scale read as 2.6e20: the binding kept only the data pointer of arrays
# imported from DLPack capsules, and a converted temporary tensor was freed; HostBytes now owns the
# array), again: the Python section. Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 240 scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
gpu_pack all
