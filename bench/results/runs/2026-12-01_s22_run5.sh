#!/usr/bin/env bash
# Session 22, run 5 (one H200), over gpubin/ staged from main (76cb993: the overlap wherever GEMM1
# runs 16-token tiles, so the GPU tests now take it at more token counts): FP4MOE_STAGE_PYTHON=0
# scripts/stage-gpu.sh. test_moe_gpu, racecheck and memcheck of the default filter, and test_api
# from gpubin/bin (its stub NVML now beside it).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
gpubin/bin/test_api > "$out/test_api.txt" 2>&1
_gpu_step "test_api (gpubin/bin)" $? $((SECONDS - s))
tail -1 "$out/test_api.txt" >> "$log"
gpu_tests 150 || { gpu_pack all; exit 1; }
gpu_sanitize racecheck 170
gpu_sanitize memcheck 120
gpu_pack all
