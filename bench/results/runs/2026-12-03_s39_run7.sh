#!/usr/bin/env bash
# Session 39, run 7 (one H200): the triton_kernels peer at prefill, gpt-oss-120b at T = 8192 / 16384
# (the large-T point), with fp4moe-bench --check, the torch peers and Marlin. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_triton_env
# (these steps were two inline functions when the run ran; they are now scripts/gpu-lib.sh's
# gpu_peer_presets, the same commands, its row printer reading the JSON lines only)
gpu_peer_presets gptoss120 8192,16384 240 --triton gpt-oss-120b
gpu_pack all
