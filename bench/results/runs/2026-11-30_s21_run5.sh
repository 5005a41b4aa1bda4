#!/usr/bin/env bash
# Session 21, run 5 (one H200): what GEMM1's overlap count costs its consumers (session 20's traces:
# Qwen3-30B T=8's GEMM1 epilogue 4114 cycles a tile, DeepSeek-R1 T=8's, without the overlap, 2299).
# signal = exp/s21-signal (the count from the producer warpgroup's thread 32 after the consumers
# arrive on a barrier; its producer loop spills, a 48-byte frame), relaxed = exp/s21-relaxed
# (DIAGNOSTIC: the consumers' count as a relaxed reduction, no ordering) against main (075483c).
# Staged with FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main
# FP4MOE_STAGE_MORE="signal=exp/s21-signal relaxed=exp/s21-relaxed" scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
for p in qwen3-30b-a3b:8,16,64 gpt-oss-20b:8,16 llama4-scout:8; do
  timeout 60 gpubin/signal/fp4moe-bench --preset ${p%%:*} --tokens ${p#*:} --routing random --check --verbose \
    >> $out/signal_check.txt 2>&1 || echo "=== signal --check $p FAILED" >> $log
done
_gpu_step "signal --check" 0 $((SECONDS - s))
grep -i "pass\|fail\|overlap" $out/signal_check.txt | head -20 >> $log
export FP4MOE_AB_ARGS="--routing random"
for v in signal relaxed; do
  GPU_AB_REPS=3 gpu_ab $v gpubin/$v/fp4moe-bench 200 qwen3-30b-a3b:8,16 gpt-oss-20b:8,16 llama4-scout:8 \
    deepseek-r1:8
done
gpu_pack all
