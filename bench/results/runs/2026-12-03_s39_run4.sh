#!/usr/bin/env bash
# Session 39, run 4 (one H200): the triton_kernels peer after runs 2-3 (routing choosing the experts
# from the router logits, as vLLM's gpt-oss path does), gpt-oss-120b and gpt-oss-20b with fp4moe-bench
# --check, the torch peers, Marlin and triton_kernels; then Qwen3-235B against Marlin and Humming in
# graph replay (session 38 timed it only eagerly), if the call's time allows. Staged with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1
# scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
# (these steps were two inline functions when the run ran; they are now scripts/gpu-lib.sh's
# gpu_peer_presets, the same commands, its row printer reading the JSON lines only)
# (the device call's 600 s: each later step only when the time left covers its limit)
gpu_peer_presets gptoss120 1,8,128,1024,4096 200 --triton gpt-oss-120b
[ $SECONDS -lt 380 ] && gpu_peer_presets gptoss20 1,8,128,4096 120 --triton gpt-oss-20b
[ $SECONDS -lt 330 ] && gpu_peer_presets qwen235 1,8,128,2048 150 --humming qwen3-235b-a22b
gpu_pack all
