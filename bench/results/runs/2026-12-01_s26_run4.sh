#!/usr/bin/env bash
# Session 26, run 4: exp/s26-permute (a CTA per token; the block copied as loaded where no weighting
# or quantization applies) against main: GPU tests, ncu of its permute at DeepSeek-R1 T=8192, an A/B
# (DeepSeek-R1 T=32 is the smallest with the separate permute; Scout weights its rows).
# Stage from exp/s26-permute: FP4MOE_STAGE_PYTHON=0 FP4MOE_STAGE_BASE=main scripts/stage-gpu.sh
source scripts/gpu-lib.sh
gpu_init
gpu_tests 150
s=$SECONDS
timeout 60 ncu --clock-control none -k regex:'permute_kernel' --launch-count 1 --section SpeedOfLight \
  --section Occupancy gpubin/bin/fp4moe-bench --preset deepseek-r1 --iters 1 --warmup 0 --routing random \
  --tokens 8192 > "$out/ncu_perm_8192.txt" 2>&1
_gpu_step "ncu permute T=8192" $? $((SECONDS - s))
grep -E "permute_kernel|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy" "$out/ncu_perm_8192.txt" |
  sed 's/^ *//' | cut -c1-120 >> "$log"
gpu_ab perm gpubin/bin/fp4moe-bench 230 deepseek-r1:32,2048,8192 qwen3-30b-a3b:128,4096 gpt-oss-120b:2048 \
  llama4-scout:2048
gpu_pack all
