#!/usr/bin/env bash
# one-off GPU run (session 6, run 4): main 2364131 (every-thread stage release, BN64/BN80 defaults): tests, the
# DeepSeek-R1 table with peers, racecheck + memcheck, presets at the changed regimes, --tune at the new boundaries
set -u
o=$OUT; log=$o/a_run4.txt
export NCCL_NVLS_ENABLE=0 FP4MOE_TOKENS=1,8,32,128,512,1536,2048,8192
FP4MOE_SECTIONS="tests bench peers" FP4MOE_TESTS="test_format_gpu test_routing_gpu test_moe_gpu test_pipeline_probe_gpu" \
  timeout 330 scripts/gpu-check.sh deepseek-r1 > $log 2>&1
{
echo "=== tune"
timeout 60 gpubin/bin/fp4moe-bench --preset deepseek-r1 --routing random --tokens 1792,2304,2560 --tune /tmp/t1.txt 2>&1 | grep -E "^ +[0-9]+ +BN"
timeout 30 gpubin/bin/fp4moe-bench --preset qwen3-30b-a3b --routing random --tokens 896,1152,1280 --tune /tmp/t2.txt 2>&1 | grep -E "^ +[0-9]+ +BN"
mkdir -p $o/presets
for p in qwen3-30b-a3b gpt-oss-120b qwen3-235b-a22b; do
  timeout 60 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 1,8,128,768,1024,2048,16384 --check --json $o/presets/$p.json 2>&1 | tail -9
done
} >> $log 2>&1
FP4MOE_SECTIONS="memcheck" FP4MOE_RACECHECK=1 FP4MOE_RACECHECK_FILTER='*deepseek_r1_w4a16_sm90*:*Hostile*sm90*:*EveryCompiled*' \
  FP4MOE_MEMCHECK_TIMEOUT=120 FP4MOE_RACECHECK_TIMEOUT=150 timeout 400 scripts/gpu-check.sh >> $log 2>&1
cd $o && tar czf a_all.tgz --exclude=a_all.tgz . && rm -rf presets bench_*.json peers_*.json
