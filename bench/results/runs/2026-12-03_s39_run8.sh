#!/usr/bin/env bash
# Session 39, run 8 (one H200), after a review: (1) is run 2's routing trap the int16 expert indices
# (a review's reading of _topk_forward: the bit packing in int16) rather than Triton 3.6.0? selftest's
# "hopper-provided32" hands routing int32 indices; (2) like for like with the triton_kernels layer,
# which runs its router: gpt-oss-120b with fp4moe-bench's own router (--routing model, gpt-oss's top
# k then softmax) instead of the given top-k, the peers on the routing it chose. Staged as run 4.
source scripts/gpu-lib.sh
gpu_init
gpu_triton_env
s=$SECONDS
timeout 60 python3 bench/triton/selftest.py --variant hopper-provided32 --tokens 1,8 > "$out/selftest_provided32.txt" 2>&1
_gpu_step "selftest hopper-provided32 (gpt-oss-20b shape)" $? $((SECONDS - s))
grep -E "T=|Error|error" "$out/selftest_provided32.txt" | head -4 >> "$log"
FP4MOE_BENCH_ARGS="--routing model --tokens 1,8,128,1024 --check --verbose" \
  gpu_peer_presets gptoss120model 1,8,128,1024 150 --triton gpt-oss-120b
gpu_pack all
