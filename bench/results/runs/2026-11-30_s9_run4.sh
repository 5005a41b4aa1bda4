#!/usr/bin/env bash
# GPU run (session 9, run 4, the last minutes of device time). gpubin/bin = branch exp/decode-ctas
# e81fc92: main + BN16_C2_S5_x3_c2 (2 consumers x 3 CTAs per SM), a tuning candidate. Its bits
# (every-config test), then --tune against the default decode config.
set -u
o=$OUT; log=$o/a_run4.txt
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
{
echo "=== test_moe_gpu (every config, overlap)"; SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu --gtest_filter='*EveryCompiled*:*GemmOverlap*' 2>&1 | tail -3; echo "=== exit ${PIPESTATUS[0]} ($SECONDS s)"
for rep in 1 2; do
  for spec in deepseek-r1:1,8,32,128 qwen3-30b-a3b:8,128 gpt-oss-120b:8,128; do
    SECONDS=0
    timeout 70 gpubin/bin/fp4moe-bench --preset ${spec%%:*} --routing random --tokens ${spec#*:} \
      --tune /tmp/t_$rep.txt --tune-only BN16_C4_S6_x1_db_c2,BN16_C2_S5_x3_c2 2>&1 | grep -vE "^ *$" | tail -8
    echo "=== ${spec} rep $rep exit ${PIPESTATUS[0]} ($SECONDS s)"
  done
done
echo "=== end"
} >> $log 2>&1
