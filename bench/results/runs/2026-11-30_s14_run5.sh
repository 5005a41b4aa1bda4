#!/usr/bin/env bash
# GPU run (session 14, run 5): main with the v2 decode layout (29c1d72), the README's
# tables: the DeepSeek-R1 sweep (w4a16, --check) with the torch peers on fp4moe-bench's routing,
# DeepSeek-R1 w4a4, every other preset (--check). As session 10's run 2 part B, with 330 s for the
# presets. Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh on main.
set -u
o=$OUT; log=$o/a_run5.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
export NCCL_NVLS_ENABLE=0
SECONDS=0
{
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 150 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"; SECONDS=0
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
  --check --json $o/bench_deepseek-r1_w4a4.json
echo "=== w4a4 exit $? ($SECONDS s)"; SECONDS=0
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 timeout 335 scripts/gpu-check.sh qwen3-30b-a3b \
  qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
echo "(presets $SECONDS s)"
echo "=== end"
} >> $log 2>&1
cd $o && tar czf 00-json.tgz $(find . -name '*.json') 2>/dev/null; ls
