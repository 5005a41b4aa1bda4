#!/usr/bin/env bash
# GPU run (session 11, run 2), same staging as run 1 (gpubin/bin and gpubin/trace = exp/weights-first,
# gpubin/base = main, gpubin/trmain = main traced, gpubin/sk = exp/split-k-range).
# 1. the first kernel timelines (main, then weights-first): DeepSeek-R1 T=1,8, Qwen3-30B T=1
# 2. A/B weights-first against main
# 3. A/B split-k-range's --split-k against main's --split-k, with --check
set -u
o=$OUT; log=$o/a_run2.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
for z in gpubin/*/fp4moe-bench.gz; do if [ ! -e "${z%.gz}" ]; then gunzip -k "$z" && chmod +x "${z%.gz}"; fi; done
export NCCL_NVLS_ENABLE=0
{
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
for b in trmain trace; do
  echo "=== trace $b: deepseek-r1 T=1,8"; SECONDS=0
  timeout 90 gpubin/$b/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1,8 --verbose --trace \
    --json $o/trace_${b}_deepseek.json 2>&1 | tail -60
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
  echo "=== trace $b: qwen3-30b-a3b T=1"
  timeout 60 gpubin/$b/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 1 --verbose --trace \
    --json $o/trace_${b}_qwen.json 2>&1 | tail -30
  echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
done
(cd $o && tar czf traces.tgz trace_*.json && rm trace_*.json)
SECONDS=0
echo "=== A/B weights-first (head) against main (base)"
FP4MOE_AB_REPS=3 timeout 240 scripts/gpu-ab.sh \
  deepseek-r1:1,8,128 qwen3-30b-a3b:1,8 gpt-oss-120b:1,8 llama4-scout:8
(cd $o && mv ab ab_weights-first && tar czf ab_weights-first.tgz ab_weights-first && rm -rf ab_weights-first)
echo "($SECONDS s)"; SECONDS=0
echo "=== A/B split-k-range --split-k (head) against main --split-k (base), --check"
FP4MOE_AB_HEAD_BIN=gpubin/sk/fp4moe-bench FP4MOE_AB_BASE_ARGS=--split-k FP4MOE_AB_HEAD_ARGS=--split-k \
  FP4MOE_AB_ARGS="--routing random --check" FP4MOE_AB_REPS=3 timeout 220 scripts/gpu-ab.sh \
  llama4-scout:1,2 llama4-maverick:1,2 mixtral-8x7b:1,2 gpt-oss-120b:1 qwen3-30b-a3b:1
(cd $o && mv ab ab_split-k-range && tar czf ab_split-k-range.tgz ab_split-k-range && rm -rf ab_split-k-range)
echo "($SECONDS s)"
} >> $log 2>&1
