#!/usr/bin/env bash
# Session 37, run 3 (one H200), main: the Python package built there and its tests (pytest, GPU and
# CPU, fresh seeds), then the example: the first Python run after 7802b20 (check_stream_device,
# which the Python ParallelMoE's forward and synchronize call, was refactored there). Staged with
# scripts/stage-gpu.sh (the Python parts included).
source scripts/gpu-lib.sh
gpu_init
gpu_python 240 || true
gpu_pack all
