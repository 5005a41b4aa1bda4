#!/usr/bin/env bash
# Session 43, run 1 (one H100, kind nvidia-h100-x1): session 42's prepared script
# (2026-12-07_s42_prepared_h100-t8-losses.sh, its comments below), at main 4472254, then racecheck of
# MoeGpu.EveryCompiledSm90ConfigGivesTheSameBits (session 40's review; never run) in the time left (the call kept under ~8 minutes: the device budget was down to 1,000 s after failed starts).
# Prepared in session 42, not yet run: where the time goes at the two H100 points where vLLM's
# Marlin and Humming GEMMs are ahead of fp4moe's whole layer (Mixtral T=8: 0.272 ms against 0.247;
# Llama-4-Scout T=8: 0.184 against 0.171; session 42's runs 4 and 6). On an H100 (name
# nvidia-h100-x1); on an H200 the same points are fp4moe's by 1.10-1.12x, run it there too for the
# contrast if time allows. Stage with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh
# (about 5 minutes of device time in all).
#   1. every kernel of one forward (ncu, SpeedOfLight): plan, permute, GEMM1, GEMM2, finalize
#      durations and DRAM throughput: how much of the layer is not the GEMMs;
#   2. the GEMMs' DRAM, L2 and issue metrics (ncu): each GEMM's read rate against Marlin's 3.21 TB/s;
#   3. the traced timeline (trace build): GEMM1's rounds (Mixtral: 896 tiles of BN16_C4 on 132 SMs,
#      a static schedule), when GEMM2's units start and end, the idle SMs of the last rounds.
source scripts/gpu-lib.sh
gpu_init
for p in mixtral-8x7b llama4-scout; do
  FP4MOE_PROFILE_BREAKDOWN=1 timeout 120 scripts/gpu-profile.sh $p 8 >> "$log" 2>&1
  FP4MOE_PROFILE_METRICS=1 timeout 120 scripts/gpu-profile.sh $p 8 >> "$log" 2>&1
done
gpu_trace mixtral-8x7b:8 llama4-scout:8
# 4. the options that change the schedule at these points (GEMM1's static rounds: Mixtral 896 tiles,
#    6.8 rounds; Scout 320 tiles, 2.4 rounds), with the SM clock and power (--clocks)
for p in mixtral-8x7b llama4-scout; do
  for opt in "" --split-k --no-gemm-overlap --no-range-split; do
    echo "=== $p T=8 ${opt:-default}" >> "$log"
    timeout 60 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --clocks --iters 400 $opt 2>&1 | \
      grep -E "^ +[0-9]+ |clock|power|MHz|W " >> "$log"
  done
done
GPU_SANITIZE_FILTER='*EveryCompiledSm90Config*'
[ $SECONDS -lt 330 ] && gpu_sanitize racecheck $((480 - SECONDS))
gpu_pack all
