#!/usr/bin/env bash
# Session 35, run 3 (one H200): test_moe_gpu after a review of the tests (the prefill back-to-back
# test's single forwards and the out-of-range-id forward's output now checked against the fp64
# reference) (memcheck left out: about 7 minutes of device time were left). Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true

gpu_pack all
