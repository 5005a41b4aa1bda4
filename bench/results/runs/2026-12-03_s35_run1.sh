#!/usr/bin/env bash
# Session 35, run 1 (one H200): test_moe_gpu at main d7a6968 (session 34's last review refactor, not
# run on a GPU then), then layers whose buffers pass 2^31 elements: --check at token counts where the
# pair rows times H (GEMM2's output, the permuted activations) or times I (GEMM1's output) exceed
# 2^31, so any 32-bit offset in the plan, permute, GEMMs or combine would show as a failed check.
# Staged with FP4MOE_STAGE_PYTHON=0 scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
big() {  # big NAME TIMEOUT fp4moe-bench arguments...
  local name=$1 t=$2 s=$SECONDS rc
  shift 2
  timeout "$t" gpubin/bin/fp4moe-bench --routing random --check --check-tokens 64 --iters 3 --warmup 1 \
    --warmup-ms 0 --verbose "$@" --json "$out/big_$name.json" > "$out/big_$name.txt" 2>&1
  rc=$?
  _gpu_step "big $name: $*" $rc $((SECONDS - s))
  grep -E "^ +[0-9]+ |pass|fail|error|rror" "$out/big_$name.txt" | head -8 >> "$log"
}
big deepseek 120 --preset deepseek-r1 --tokens 40000            # pairs x H = 2.29e9
big deepseek-w4a4 120 --preset deepseek-r1 --tokens 40000 --mode w4a4
big qwen3-30b 120 --preset qwen3-30b-a3b --tokens 150000        # pairs x H = 2.46e9
big gpt-oss-120b 150 --preset gpt-oss-120b --tokens 200000      # pairs x H = 2.30e9
big mixtral 150 --preset mixtral-8x7b --tokens 80000            # pairs x I = 2.29e9, x 2I = 4.6e9
big maverick 240 --preset llama4-maverick --tokens 430000       # pairs x H = 2.20e9, top-1 + shared
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$log" 2>&1
gpu_pack all
