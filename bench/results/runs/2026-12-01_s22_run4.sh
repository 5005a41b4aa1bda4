#!/usr/bin/env bash
# Session 22, run 4 (two H200s, the warm machine of run 3, the same gpubin/ from main b4c0657): the
# README's tables. Run as the device command itself:
source scripts/gpu-lib.sh; gpu_init; gpu_tables; gpu_pack all
