#!/usr/bin/env bash
# Session 33, run 2 (one H200): the Python package with the new allocator test (the forward's
# pointer checks under torch's cudaMalloc, expandable-segments and cudaMallocAsync allocators),
# every test binary again (the CLI changes, run_local_ranks), fp4moe-bench's JSON read back by
# Python (escaped strings), and fp4moe-bench-parallel on this one GPU: --nproc 2 refused up front,
# --nproc 1 runs. Staged with scripts/stage-gpu.sh (Python parts included).
source scripts/gpu-lib.sh
gpu_init
s=$SECONDS
FP4MOE_SECTIONS="tests python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check tests python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check" "$out/check_log.txt" >> "$log"
grep -h "allocator" "$out"/check/*.log 2>/dev/null | head -5 >> "$log"
mkdir -p "$out/bench"
s=$SECONDS
timeout 90 gpubin/bin/fp4moe-bench --preset qwen3-30b-a3b --tokens 1,8 --routing random --check \
  --json "$out/bench/bench_qwen3.json" > "$out/bench/bench_qwen3.txt" 2>&1
_gpu_step "fp4moe-bench qwen3-30b-a3b:1,8" $? $((SECONDS - s))
grep -E "^ +[0-9]+ " "$out/bench/bench_qwen3.txt" >> "$log"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('json ok:', d['command'][:60], [r.get('validate_us') for r in d['rows']])" \
  "$out/bench/bench_qwen3.json" >> "$log" 2>&1
s=$SECONDS
timeout 60 gpubin/bin/fp4moe-bench-parallel --nproc 2 --tokens 1 > "$out/bench_parallel_nproc2.txt" 2>&1
_gpu_step "fp4moe-bench-parallel --nproc 2 on one GPU (expect 2: refused)" $? $((SECONDS - s))
tail -2 "$out/bench_parallel_nproc2.txt" >> "$log"
s=$SECONDS
timeout 120 gpubin/bin/fp4moe-bench-parallel --nproc 1 --tokens 1,128 --iters 5 --warmup 2 > "$out/bench_parallel_nproc1.txt" 2>&1
_gpu_step "fp4moe-bench-parallel --nproc 1" $? $((SECONDS - s))
tail -4 "$out/bench_parallel_nproc1.txt" >> "$log"
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
grep -E "OK \]|FAILED|PASSED" "$out/test_parallel_gpu_one.txt" | head -8 >> "$log"
gpu_pack all
