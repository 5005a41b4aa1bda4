#!/usr/bin/env bash
# Session 39, run 9 (one H200): the review's changes to the triton_kernels peer on a GPU (its
# compute-capability and layout checks, selftest's exit status): selftest hopper-steps at T=1 and
# gpt-oss-20b at T=1 with every peer. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_triton_env
s=$SECONDS
timeout 60 python3 bench/triton/selftest.py --variant hopper-steps --tokens 1 > "$out/selftest_steps.txt" 2>&1
_gpu_step "selftest hopper-steps T=1" $? $((SECONDS - s))
grep -E "T=|Error|error" "$out/selftest_steps.txt" | head -4 >> "$log"
gpu_peer_presets gptoss20 1 60 --triton gpt-oss-20b
gpu_pack all
