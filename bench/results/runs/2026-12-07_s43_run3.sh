#!/usr/bin/env bash
# Session 43, run 3 (one H100, kind nvidia-h100-x1): the two H100 "losses" of session 42 (Mixtral-8x7B
# and Llama-4-Scout at T=8) with the routing paired. fp4moe-bench times a rotation of 8 input sets,
# each with its own random routing, but reported set 0's experts and floor, and the extra peers
# rotated through 7 sets drawn apart: at Scout T=8 fp4moe's sets touch 5 6 8 7 8 6 7 8 experts
# (mean 6.88; 6.45 expected under uniform routing, set 0 has 5), at Mixtral T=8 8 7 8 8 8 7 8 8
# (mean 7.75, 7.20 expected). Now (this commit) the floor is the median set's, --dump-routing writes
# every set and Marlin rotates through exactly fp4moe-bench's sets. Staged with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_MARLIN=1 scripts/stage-gpu.sh. Device budget left: ~260 s, so Marlin alone (no Humming), short limits.
source scripts/gpu-lib.sh
gpu_init
gpu_peer_presets paired 8 80 "" llama4-scout mixtral-8x7b
gpu_pack all
