#!/usr/bin/env bash
# GPU run (session 15, run 3): main with the narrowed BN32/48/80 tiles (8539799). test_moe_gpu, the
# README's tables as session 14's run 5 (the DeepSeek-R1 sweep with --check and the torch peers,
# DeepSeek-R1 w4a4, every other preset with --check), then in the time left an A/B (2 repetitions)
# of exp/narrow-n96 (BN64 and BN96 narrowed too) against main at DeepSeek-R1 T=1536 (48 rows per
# expert: BN64) and T=2560 (80: BN96). Staged on main with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_MORE="n96=exp/narrow-n96" scripts/stage-gpu.sh.
set -u
o=$OUT; log=$o/a_run3.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -4
echo "=== test_moe_gpu exit ${PIPESTATUS[0]} ($SECONDS s)"; SECONDS=0
FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 timeout 150 scripts/gpu-check.sh deepseek-r1
echo "(sweep $SECONDS s)"; SECONDS=0
timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
  --check --json $o/bench_deepseek-r1_w4a4.json
echo "=== w4a4 exit $? ($SECONDS s)"; SECONDS=0
FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 timeout 300 scripts/gpu-check.sh qwen3-30b-a3b \
  qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b
echo "(presets $SECONDS s)"
} >> $log 2>&1
(cd $o && tar czf 00-json.tgz $(find . -name '*.json') 2>/dev/null && find . -name '*.json' -delete)
left=$((545 - SECONDS))
if [ $left -gt 40 ]; then
  OUT=$o/n96 FP4MOE_AB_REPS=2 FP4MOE_AB_HEAD_BIN=gpubin/n96/fp4moe-bench FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench \
    timeout $left bash scripts/gpu-ab.sh deepseek-r1:1536,2560 > $o/ab_n96.txt 2>&1
  echo "=== ab n96 exit $? (limit $left s)" >> $log
  tar -C $o -czf $o/ab_n96.tgz n96 && rm -rf $o/n96
fi
echo "=== end ($SECONDS s)" >> $log
ls $o
