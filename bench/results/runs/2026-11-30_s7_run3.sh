#!/usr/bin/env bash
# GPU run (session 7, run 3): every other preset, w4a16, T = 1 / 128 / 4096 / 16384 with --check (the
# README's preset table), and DeepSeek-R1 w4a4.
set -u
o=$OUT; log=$o/a_run3.txt
tar -C gpubin -xzf gpubin/bin.tar.gz
for p in qwen3-30b-a3b qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick mixtral-8x7b; do
  timeout 120 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 1,128,4096,16384 --check --verbose \
    --json $o/bench_$p.json > $o/log_$p.txt 2>&1
  echo "=== $p exit $?" >> $log
  grep -E "^ +[0-9]+ " $o/log_$p.txt >> $log
done
timeout 150 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 --check \
  --json $o/bench_deepseek-r1_w4a4.json > $o/log_w4a4.txt 2>&1
echo "=== deepseek-r1 w4a4 exit $?" >> $log
grep -E "^ +[0-9]+ " $o/log_w4a4.txt >> $log
cd $o && tar czf a_json.tgz bench_*.json log_*.txt && rm -f bench_*.json log_*.txt
echo "=== end" >> $log
