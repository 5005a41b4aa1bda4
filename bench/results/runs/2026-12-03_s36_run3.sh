#!/usr/bin/env bash
# Session 36, run 3 (one H200): run 2 again after its fix (a stream being captured is not queried); the stream-device checks (MoeLayer::forward, check_device_errors,
# route_gpu and the GPU codec refuse a stream of another device; one cudaStreamGetDevice each, in
# relaxed capture mode) under every one-GPU test that passes streams, graph capture included:
# test_moe_gpu, test_routing_gpu, test_format_gpu, test_parallel_gpu's one-GPU tests, the Python
# package (torch's current stream), and fp4moe-bench --check (stream and graph timings) at
# DeepSeek-R1 T = 1 / 8. The two-GPU test of the refusal skips here. Staged with scripts/stage-gpu.sh.
source scripts/gpu-lib.sh
gpu_init
_gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt "test_moe_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_routing_gpu test_routing_gpu.txt "test_routing_gpu" 200 || true
_gpu_test_bin gpubin/bin/test_format_gpu test_format_gpu.txt "test_format_gpu" 120 || true
_gpu_test_bin gpubin/bin/test_parallel_gpu test_parallel_gpu_one.txt "test_parallel_gpu (one-GPU tests)" 120 || true
s=$SECONDS
FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout 300 scripts/gpu-check.sh \
  > "$out/check_log.txt" 2>&1
_gpu_step "gpu-check python" $? $((SECONDS - s))
grep -E "^=== |passed|failed|gpu-check|FAILED|FP4MOE_TEST_SEED" "$out/check_log.txt" >> "$log"
gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8 || true
gpu_pack all
