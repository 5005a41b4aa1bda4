#!/usr/bin/env bash
# One device call's worth of GPU checks, laid out so that the two GPUs of an nvidia-h200-x2 machine
# work at once (session 4 ran its checks this way: bench/results/README.md). Runs from the repository
# root over what scripts/stage-gpu.sh packed into gpubin/, through scripts/gpu-check.sh's sections:
#   1. both GPUs: the parallel section (test_parallel_gpu, fp4moe-bench-parallel on DeepSeek-R1)
#   2. GPU 0: tests, DeepSeek-R1 bench with the torch peers, every other preset at T=1/128/16384
#      GPU 1 at the same time: memcheck, DeepSeek-R1 w4a4 bench, the generated checkpoints
#   3. both GPUs: the python section (wheel, pytest including the 2-GPU ParallelMoE tests)
# With one GPU the same steps run one after another (no parallel section, no 2-GPU tests).
# Everything lands under $OUT/r and is packed into $OUT/results.tgz (the device tool returns at most
# 8 files). Exits non-zero when any step failed. Usage: scripts/gpu-session.sh (env as gpu-check.sh)
set -u
root=$(pwd)
out=${OUT:-/tmp/fp4moe-out}
r=$out/r
mkdir -p "$r/par" "$r/g0" "$r/g1" "$r/py"
export NCCL_NVLS_ENABLE=0
[ -f gpubin/bin.tar.gz ] && rm -rf gpubin/bin && tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
t0=$(date +%s)
step() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
check() { FP4MOE_BIN=gpubin/bin bash "$root/scripts/gpu-check.sh" "$@"; }
presets_args="--routing random --tokens 1,128,16384 --check --iters 30"

if [ "$gpus" -ge 2 ]; then
  step parallel
  FP4MOE_SECTIONS=parallel FP4MOE_TEST_TIMEOUT=120 OUT=$r/par \
    FP4MOE_PARALLEL_ARGS="${FP4MOE_PARALLEL_ARGS:---preset deepseek-r1 --tokens 128,1024,8192 --configs dp2tp1ep2,dp1tp2ep1}" \
    check > "$r/par/out.txt" 2>&1
  grep -E "^=== " "$r/par/parallel.log" | head -4
fi

gpu1_work() {
  FP4MOE_SECTIONS=memcheck FP4MOE_MEMCHECK_TIMEOUT=300 OUT=$r/g1 check
  FP4MOE_SECTIONS=bench FP4MOE_BENCH_TIMEOUT=150 OUT=$r/g1 \
    FP4MOE_BENCH_ARGS="--mode w4a4 --routing random --tokens 1,8,32,128,512,2048,8192 --check" check deepseek-r1
  FP4MOE_SECTIONS=checkpoint OUT=$r/g1 check
}
if [ "$gpus" -ge 2 ]; then (export CUDA_VISIBLE_DEVICES=1; gpu1_work > "$r/g1/out.txt" 2>&1) & g1=$!; fi
step "tests, benches (GPU 0)"
(
  [ "$gpus" -ge 2 ] && export CUDA_VISIBLE_DEVICES=0
  FP4MOE_SECTIONS=tests OUT=$r/g0 check
  FP4MOE_SECTIONS="bench peers" OUT=$r/g0 check deepseek-r1
  FP4MOE_SECTIONS=bench FP4MOE_BENCH_TIMEOUT=90 FP4MOE_BENCH_ARGS="$presets_args" OUT=$r/g0 \
    check qwen3-30b-a3b qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
) > "$r/g0/out.txt" 2>&1
if [ "$gpus" -ge 2 ]; then wait $g1; else gpu1_work > "$r/g1/out.txt" 2>&1; fi
grep -hE "^\|" "$r/g0/bench.log" | head -10
step python
FP4MOE_SECTIONS=python OUT=$r/py check > "$r/py/out.txt" 2>&1
step done
tar -C "$out" -czf "$out/results.tgz" r
failed=$(cat "$r"/*/*.log 2>/dev/null | grep -E "^=== .* exit [0-9]+" | grep -vE " exit 0( in [0-9]+ s)?$")
if [ -n "$failed" ]; then echo "gpu-session: FAILED steps:"; echo "$failed"; exit 1; fi
echo "gpu-session: every step passed"
