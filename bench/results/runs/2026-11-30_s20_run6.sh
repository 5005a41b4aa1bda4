#!/usr/bin/env bash
# GPU run (session 20, run 6): the README's tables on main (9519be7's kernels: the token rows a
# tile's MMAs read, GEMM2's tile hand-off, GEMM1's decode epilogue and release reduction), staged
# with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh, as session 19's run 5: test_moe_gpu, the
# DeepSeek-R1 sweep with --check and the torch peers, every other preset with --check, DeepSeek-R1
# w4a4. Each section is packed as it ends. (Racecheck: run 2, on 40e837f.)
set -u
o=$OUT; log=$o/a_run6.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
pack() { (cd $o && tar czf "$1.tgz" $(find . -name '*.json' -o -name '*.log' | grep -v '\.tgz') 2>/dev/null &&
  find . \( -name '*.json' -o -name '*.log' \) -delete); }
{
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -4
echo "=== test_moe_gpu exit ${PIPESTATUS[0]} ($SECONDS s)"
SECONDS=0
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 150 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"
} >> $log 2>&1
pack 01-deepseek
{
SECONDS=0
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 timeout 300 scripts/gpu-check.sh qwen3-30b-a3b \
  qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
echo "(presets $SECONDS s)"
} >> $log 2>&1
pack 02-presets
{
SECONDS=0
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
  --check --json $o/bench_deepseek-r1_w4a4.json
echo "=== w4a4 exit $? ($SECONDS s)"
} >> $log 2>&1
pack 03-w4a4
ls $o
