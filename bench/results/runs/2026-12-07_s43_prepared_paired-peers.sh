#!/usr/bin/env bash
# Prepared in session 43, not yet run (its device time ran out after failed machine starts): session
# 42's two H100 "losses" (Mixtral-8x7B and Llama-4-Scout at T=8) with the routing paired, then the
# same presets at T = 1 / 16 / 128. fp4moe-bench times a rotation of 8 input sets, each with its
# own random routing, but until session 43 reported set 0's experts and floor, and the extra peers
# rotated through set 0 and 7 sets drawn apart: at Scout T=8 fp4moe's sets touch 5 6 8 7 8 6 7 8
# experts (mean 6.88; 6.45 expected under uniform routing; set 0 has 5), at Mixtral T=8 8 7 8 8 8 7 8
# 8 (mean 7.75, 7.20 expected). Since af64590 the floor is the median set's, --dump-routing writes
# every set and Marlin and Humming rotate through exactly fp4moe-bench's sets (their JSON rows say
# `*_routing_sets_from: fp4moe-bench`). On an H100 (nvidia-h100-x1) where session 42's numbers came
# from; on an H200 too if time allows. Stage with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1
# FP4MOE_STAGE_HUMMING=1 scripts/stage-gpu.sh (about 3-4 device minutes: Humming compiles its
# kernels on first use).
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_peer_presets scout 1,8,16,128 150 --humming llama4-scout
gpu_peer_presets mixtral 1,8,16,128 150 --humming mixtral-8x7b
gpu_pack all
