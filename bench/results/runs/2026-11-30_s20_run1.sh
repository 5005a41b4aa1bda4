#!/usr/bin/env bash
# Session 20, run 1 (one H200), over gpubin/ staged from the working tree (main + LayerOptions::max_sms;
# FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh). Diagnostics for what bounds the decode GEMMs:
#  1. the new max_sms test and the argument tests;
#  2. DeepSeek-R1 T = 8 / 32 / 128 (and Qwen3-30B, Llama-4-Scout T=8) with the GEMMs' grids capped
#     at 132 (all) / 120 / 100 / 80 / 66 SMs, in an up-then-down order: does the layer's time grow
#     as 1 / SMs (each SM's own rate bounds it) or stay flat (something all SMs share bounds it)?
#  3. the 4- and 2-consumer decode configs against each other at the small presets' T = 8 / 16 / 32
#     (--tune over the two only), where 2-4 rounds of 4-consumer tiles leave a partial last round;
#  4. ncu memory metrics of GEMM1 and GEMM2 at DeepSeek-R1 T = 8 / 128 (DRAM bytes read and
#     written, L2 hit rate of the SMs' reads, L2 throughput) and of the decode probe's streams.
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*MaxSms*:*Rejects*' > "$out/tests.txt" 2>&1
_gpu_step "max_sms tests" $? $((SECONDS - s))
tail -3 "$out/tests.txt" >> "$log"

b=gpubin/bin/fp4moe-bench
mkdir -p "$out/sms"
s=$SECONDS
for pass in 1 2; do
  order="0 120 100 80 66"
  [ $pass = 2 ] && order="66 80 100 120 0"
  for lim in $order; do
    extra=""
    [ "$lim" != 0 ] && extra="--max-sms $lim"
    timeout 60 $b --preset deepseek-r1 --routing random --tokens 8,32,128 $extra \
      --json "$out/sms/deepseek-r1_${lim}_$pass.json" > "$out/sms/deepseek-r1_${lim}_$pass.log" 2>&1
    for p in qwen3-30b-a3b llama4-scout; do
      timeout 60 $b --preset $p --routing random --tokens 8,128 $extra \
        --json "$out/sms/${p}_${lim}_$pass.json" > "$out/sms/${p}_${lim}_$pass.log" 2>&1
    done
  done
done
_gpu_step "max_sms sweep" $? $((SECONDS - s))
python3 - "$out/sms" >> "$log" 2>&1 <<'PY'
import glob, json, os, sys, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    preset, lim, _ = os.path.basename(f)[:-5].rsplit("_", 2)
    for r in json.load(open(f))["rows"]:
        t[(preset, r["T"], int(lim))].append(r["graph_ms"])
for k in sorted(t):
    print("sms %-16s T=%-4d max_sms=%-3d graph ms %s" % (k[0], k[1], k[2], " ".join("%.4f" % v for v in t[k])))
PY

s=$SECONDS
mkdir -p "$out/tune"
for p in qwen3-30b-a3b gpt-oss-20b gpt-oss-120b llama4-scout mixtral-8x7b qwen3-235b-a22b; do
  timeout 90 $b --preset $p --routing random --tokens 8,16,32 --tune "$out/tune/$p.txt" \
    --tune-only BN16_C4_S4_x1_db_c4,BN16_C2_S4_x1_db_c4 > "$out/tune/$p.log" 2>&1
  echo "=== tune $p exit $?" >> "$log"
  grep -E "BN16|^#" "$out/tune/$p.txt" | head -12 >> "$log"
done
_gpu_step "tune 4 vs 2 consumers" 0 $((SECONDS - s))

s=$SECONDS
m=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_bytes.sum.per_second
m+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
m+=,dram__bytes.sum.per_second,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
ncu --query-metrics > "$out/ncu_query.txt" 2>&1
for T in 8 128; do
  timeout 150 ncu --clock-control none -k regex:moe_gemm_sm90 --launch-count 2 --metrics "$m" \
    $b --preset deepseek-r1 --routing random --tokens $T --iters 2 --warmup 0 --warmup-ms 0 \
    > "$out/ncu_deepseek_T$T.txt" 2>&1
  echo "=== ncu deepseek-r1 T=$T exit $?" >> "$log"
  grep -E "moe_gemm|dram__|lts__|gpu__time|sm__cycles" "$out/ncu_deepseek_T$T.txt" | sed 's/^ *//' | cut -c1-120 >> "$log"
done
timeout 150 ncu --clock-control none -k regex:stream_loop --metrics "$m" \
  gpubin/bin/fp4moe-decode-probe --set pipeline --reps 1 > "$out/ncu_probe.txt" 2>&1
echo "=== ncu probe exit $?" >> "$log"
grep -E "stream_loop|dram__bytes_read|hit_rate|gpu__time" "$out/ncu_probe.txt" | sed 's/^ *//' | cut -c1-120 \
  | head -120 >> "$log"
_gpu_step "ncu" 0 $((SECONDS - s))
gpu_pack all
