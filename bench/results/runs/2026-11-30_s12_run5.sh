#!/usr/bin/env bash
# GPU run (session 12, run 5): main with direct GEMM1 merged, the README's decode tables: the
# DeepSeek-R1 sweep (w4a16, --check) with the torch peers on fp4moe-bench's routing, and every
# other preset at T = 1, 8, 16, 128 (--check). The prefill columns of the preset table (T=4096,
# 16384) stay those of session 11's run 5 (too long for this session's remaining device time).
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh on main.
set -u
o=$OUT; log=$o/a_run5.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
SECONDS=0
{
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 170 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"; SECONDS=0
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128 timeout 200 scripts/gpu-check.sh qwen3-30b-a3b \
  qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
echo "(presets $SECONDS s)"
echo "=== end"
} >> $log 2>&1
cd $o && tar czf 00-json.tgz $(find . -name '*.json') 2>/dev/null; ls
