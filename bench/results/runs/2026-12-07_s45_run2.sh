#!/usr/bin/env bash
# Session 45, run 2: the paired peers for the presets whose H100 peer rows are still session 42's
# unpaired ones (DeepSeek-R1, Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b): fp4moe-bench, then
# Marlin and Humming (and triton_kernels at gpt-oss-120b) rotating through exactly fp4moe-bench's
# routing sets (`*_routing_sets_from: fp4moe-bench` in the JSON), T = 1 / 8 / 16 / 128. Session 44's
# run 1 took 84-89 s a preset this way (Humming compiles its kernels on first use). Each preset
# starts only while the call has time for it (guards at 420 s in all). Staging as session 44's run 1
# (its header): FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1
# FP4MOE_STAGE_TRITON=1 FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu" scripts/stage-gpu.sh.
# test_moe_gpu runs first unless FP4MOE_SKIP_TESTS=1 (set when run 1 of the same session passed it
# at the same commit). As it ran in session 45: FP4MOE_SKIP_TESTS=1, the default list, 295 s.
source scripts/gpu-lib.sh
gpu_init
if [ "${FP4MOE_SKIP_TESTS:-0}" != 1 ]; then gpu_tests || { gpu_pack all; exit 1; }; fi
gpu_humming_env
gpu_triton_env
# FP4MOE_PAIRED_SPECS (NAME:PRESET:PEERS_ARGS, separated by ";") replaces the list for another run,
# e.g. the other four presets on an H200 (perf-notes' plan): "scout:llama4-scout:--humming;
# mixtral:mixtral-8x7b:--humming;maverick:llama4-maverick:--humming;gptoss20:gpt-oss-20b:--humming --triton".
specs=${FP4MOE_PAIRED_SPECS:-"deepseek:deepseek-r1:--humming;qwen30:qwen3-30b-a3b:--humming;qwen235:qwen3-235b-a22b:--humming;gptoss120:gpt-oss-120b:--humming --triton"}
IFS=';' read -r -a spec_list <<< "$specs"
for spec in "${spec_list[@]}"; do
  spec=$(echo "$spec" | sed 's/^ *//; s/ *$//')
  IFS=: read -r name preset peers <<< "$spec"
  left=$((420 - SECONDS))
  if [ $left -lt 100 ]; then echo "=== $preset skipped: $SECONDS s gone" >> "$log"; continue; fi
  lim=$((left - 60)); [ $lim -gt 150 ] && lim=150
  gpu_peer_presets "$name" 1,8,16,128 "$lim" "$peers" "$preset"
done
gpu_pack all
