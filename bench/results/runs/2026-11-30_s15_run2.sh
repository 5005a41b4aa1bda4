#!/usr/bin/env bash
# GPU run (session 15, run 2). Staged on exp/narrow-n32 (3352a20) with FP4MOE_STAGE_PYTHON=0
# FP4MOE_STAGE_BASE=main FP4MOE_STAGE_MORE="all=exp/narrow-n2" scripts/stage-gpu.sh (main cf8b0e1,
# exp/narrow-n2 1c31169). test_moe_gpu on exp/narrow-n32; A/Bs against main (2 repetitions each) of
# exp/narrow-n32 (BN16 and BN32 narrowed) and of exp/narrow-n2 (every tile size narrowed); then
# fp4moe-decode-probe --set overlap (the mix modes as fixed after session 14's runs 7-8).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
export NCCL_NVLS_ENABLE=0
SECONDS=0
timeout 60 gpubin/bin/test_moe_gpu 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -6 > $o/tests.txt
echo "=== test_moe_gpu exit ${PIPESTATUS[0]} ($SECONDS s)" >> $o/run.txt
specs="deepseek-r1:32,512,1024,2048,4096 qwen3-30b-a3b:512,2048 gpt-oss-120b:2048"
SECONDS=0
OUT=$o/n32 FP4MOE_AB_REPS=2 timeout 170 bash scripts/gpu-ab.sh $specs > $o/ab_n32.txt 2>&1
echo "=== ab n32 exit $? ($SECONDS s)" >> $o/run.txt
SECONDS=0
OUT=$o/all FP4MOE_AB_REPS=2 FP4MOE_AB_HEAD_BIN=gpubin/all/fp4moe-bench timeout 170 bash scripts/gpu-ab.sh $specs \
  > $o/ab_all.txt 2>&1
echo "=== ab all exit $? ($SECONDS s)" >> $o/run.txt
SECONDS=0
timeout 90 gpubin/bin/fp4moe-decode-probe --set overlap > $o/probe_overlap.txt 2>&1
echo "=== probe exit $? ($SECONDS s)" >> $o/run.txt
tar -C $o -czf $o/ab.tgz n32 all && rm -rf $o/n32 $o/all
