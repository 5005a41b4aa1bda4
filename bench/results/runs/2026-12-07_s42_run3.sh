#!/usr/bin/env bash
# Session 42, run 3 (one GPU; the device tool lent H100s this session): main, vLLM's Hopper FP4 MoE
# kernels as peers on an H100 for the first time (Marlin, Humming; triton_kernels on gpt-oss), at the
# decode points, in graph replay; then memcheck of the overlap and direct-GEMM1 tests (the code run 1
# measured). Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1
# FP4MOE_STAGE_TRITON=1 scripts/stage-gpu.sh, then bin.tar.gz repacked with fp4moe-bench and test_moe_gpu
# alone (the carry limit).
source scripts/gpu-lib.sh
gpu_init
gpu_humming_env
gpu_triton_env
gpu_peer_presets qwen30 1,8,128 150 --humming qwen3-30b-a3b
[ $SECONDS -lt 200 ] && gpu_peer_presets gptoss120 1,8,128 150 "--humming --triton" gpt-oss-120b
for f in "$out"/*/peers_*.json; do
  [ -f "$f" ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "complete:", d.get("complete"), "rows:", [r["T"] for r in d["rows"]])' "$f" >> "$log" 2>&1
done
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*'
[ $SECONDS -lt 330 ] && gpu_sanitize memcheck $((420 - SECONDS))
gpu_pack all
