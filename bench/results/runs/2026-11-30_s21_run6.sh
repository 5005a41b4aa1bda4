#!/usr/bin/env bash
# Session 21, run 6 (one H200), over gpubin/ staged from exp/s21-count (1698242: GEMM1's overlap count
# from the producer warpgroup's thread 32; the cleaned-up exp/s21-signal without its spills) with base
# main (e69a717's kernels = 075483c's): FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150 || { gpu_pack all; exit 1; }
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*' gpu_sanitize racecheck 150
GPU_SANITIZE_FILTER='*GemmOverlap*:*DirectGemm1*' gpu_sanitize memcheck 100
s=$SECONDS
for p in qwen3-30b-a3b:8,16 gpt-oss-20b:8,16 llama4-scout:8,16 mixtral-8x7b:8; do
  timeout 60 gpubin/bin/fp4moe-bench --preset ${p%%:*} --tokens ${p#*:} --routing random --check --verbose \
    >> $out/count_check.txt 2>&1 || echo "=== --check $p FAILED" >> $log
done
_gpu_step "--check" 0 $((SECONDS - s))
grep -i "pass\|fail" $out/count_check.txt | head -20 >> $log
export FP4MOE_AB_ARGS="--routing random"
GPU_AB_REPS=3 gpu_ab count gpubin/bin/fp4moe-bench 240 qwen3-30b-a3b:8,16 gpt-oss-20b:8,16 llama4-scout:8,16 \
  mixtral-8x7b:8 deepseek-r1:8
gpu_pack all
