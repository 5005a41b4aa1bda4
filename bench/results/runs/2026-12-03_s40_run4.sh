#!/usr/bin/env bash
# Session 40, run 4 (one H200): kernel timelines (trace build) of decode points that miss the 1.4x
# target and were never traced: gpt-oss-20b T = 8 / 128, Mixtral T=128, Qwen3-30B T=128; then the
# review's Humming peer (layers moved with .to(device), describe() printing each failure once) on
# gpt-oss-20b T = 1 / 128 (Marlin and triton_kernels not staged: the carry limit). Staged with
# FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRACE=1 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_trace gpt-oss-20b:8,128 mixtral-8x7b:128 qwen3-30b-a3b:128
gpu_humming_env
s=$SECONDS
timeout 120 python3 -m pytest -q tests/python/test_bench_tools.py > "$out/test_bench_tools.txt" 2>&1
_gpu_step "test_bench_tools (image's PyTorch)" $? $((SECONDS - s))
tail -2 "$out/test_bench_tools.txt" >> "$log"
gpu_peer_presets gptoss20 1,128 150 --humming gpt-oss-20b
grep -h -A3 "Traceback" "$out"/*/bench.log | head -30 >> "$log"
gpu_pack all
