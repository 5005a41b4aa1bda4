#!/usr/bin/env bash
# Session 39, run 2 (one H200): run 1's triton_kernels peer failed its check (relative error 0.46-0.92)
# and faulted (illegal address) at T=8. bench/triton/selftest.py takes it apart: GEMM1 alone and the
# whole layer against the reference, in Hopper's swizzled layouts or plain strided ones, the routing
# handed its experts or choosing them; CUDA_LAUNCH_BLOCKING=1 so that a fault names its call.
# Staged as run 1 (FP4MOE_STAGE_TRITON=1 is the part used).
source scripts/gpu-lib.sh
gpu_init
gpu_triton_env
export CUDA_LAUNCH_BLOCKING=1
for v in hopper-provided hopper-topk strided-provided; do
  s=$SECONDS
  timeout 150 python3 bench/triton/selftest.py --variant $v > "$out/selftest_$v.txt" 2>&1
  _gpu_step "selftest $v (gpt-oss-20b shape)" $? $((SECONDS - s))
  grep -E "T=|Error|error" "$out/selftest_$v.txt" | head -8 >> "$log"
done
s=$SECONDS
timeout 120 python3 bench/triton/selftest.py --variant hopper-provided --shape 2880,2880,128,4 --tokens 8 \
  > "$out/selftest_120b.txt" 2>&1
_gpu_step "selftest hopper-provided (gpt-oss-120b shape, T=8)" $? $((SECONDS - s))
grep -E "T=|Error|error" "$out/selftest_120b.txt" | head -8 >> "$log"
gpu_pack all
