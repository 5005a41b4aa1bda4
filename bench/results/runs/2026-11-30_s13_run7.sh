#!/usr/bin/env bash
# GPU run (session 13, run 7). Staged on main with
#   FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_MORE="s9=exp/bn16-s9 pc=exp/plan-coresident" scripts/stage-gpu.sh
# A/Bs against main (gpubin/bin): BN16_C4 with 9 stages (6 on main) at decode; the co-resident
# plan at DeepSeek-R1 T=1 (five repetitions).
set -u
o=$OUT
[ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
bash scripts/gpu-unpack-builds.sh
run_ab() {  # name reps spec...
  local name=$1 reps=$2; shift 2
  SECONDS=0
  echo "=== A/B $name against main: $*" >> $o/try.txt
  FP4MOE_AB_REPS=$reps FP4MOE_AB_BASE_BIN=gpubin/bin/fp4moe-bench FP4MOE_AB_HEAD_BIN=gpubin/$name/fp4moe-bench \
    OUT=$o/$name timeout 200 scripts/gpu-ab.sh "$@" > $o/ab_$name.txt 2>&1
  echo "exit $? ($SECONDS s)" >> $o/try.txt
  sed -n '/^base .* vs head/,$p' $o/ab_$name.txt >> $o/try.txt
}
run_ab s9 3 deepseek-r1:8,128 qwen3-30b-a3b:8,128 gpt-oss-120b:8
run_ab pc 5 deepseek-r1:1
(cd $o && tar czf ab7.tgz s9 pc ab_*.txt && rm -rf s9 pc ab_*.txt)
