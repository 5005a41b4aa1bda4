#!/usr/bin/env bash
# Runs on the GPU machine over what scripts/stage-gpu.sh packed into gpubin/, writing logs and JSON
# under $OUT (at most 8 files come back, so sections share logs). Sections, chosen by
# FP4MOE_SECTIONS (default "tests bench"; "all" for every one, parallel needing 2 GPUs):
#   tests       the test binaries in FP4MOE_TESTS (default: every CPU test and the 1-GPU tests;
#               test_parallel_gpu is in the parallel section)
#   memcheck    compute-sanitizer memcheck on the GPU tests (racecheck too with FP4MOE_RACECHECK=1)
#   bench       fp4moe-bench per preset in "$@" (default deepseek-r1), args FP4MOE_BENCH_ARGS
#   peers       bench/peers_torch.py on the same presets and tokens, then bench/compare.py; with the
#               Marlin peer when staged (FP4MOE_STAGE_MARLIN=1), more arguments in FP4MOE_PEERS_ARGS
#               (--humming: run gpu-lib's gpu_humming_env first), its limit FP4MOE_PEERS_TIMEOUT (300 s)
#   python      builds the wheel there (pip, carried build deps), pytest tests/python (the 2-GPU
#               ParallelMoE tests where there are 2 GPUs), the example; FP4MOE_PYTEST_K (a pytest -k
#               expression) runs only the matching tests of test_gpu.py, without the example
#   checkpoint  generated checkpoints through fp4moe-check and fp4moe-bench --checkpoint
#   large       fp4moe-bench --check at token counts whose buffers pass 2^31 elements (64-bit
#               offsets in every kernel; ~4 minutes, ~60 GB of GPU memory at Llama-4-Maverick)
#   parallel    test_parallel_gpu and fp4moe-bench-parallel --nproc 2 (2 GPUs)
# Exits non-zero when any step it ran failed (every step prints "=== <what> exit <rc>").
# Every JSON it writes (bench, peers) is also packed into $OUT/00-json.tgz at the end (named to sort
# first: the device tool returned the first 8 files by name), so that none is
# lost to the device tool's 8 returned files (session 8's run 3 lost three).
set -u
root=$(pwd)
out=${OUT:-/tmp/fp4moe-out}
mkdir -p "$out"
# (Unpacked here unless FP4MOE_BIN names binaries already unpacked: scripts/gpu-session.sh runs two of
# these at once and unpacks once.)
if [ -z "${FP4MOE_BIN:-}" ] && [ -f gpubin/bin.tar.gz ]; then rm -rf gpubin/bin && tar -C gpubin -xzf gpubin/bin.tar.gz; fi
bash scripts/gpu-unpack-builds.sh
bin=${FP4MOE_BIN:-gpubin/bin}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
sections=" ${FP4MOE_SECTIONS:-tests bench} "
[ "$sections" = " all " ] && sections=" tests memcheck bench peers python checkpoint large parallel "
for s in $sections; do
  case $s in tests|memcheck|bench|peers|python|checkpoint|large|parallel) ;;
    *) echo "gpu-check: unknown section '$s' in FP4MOE_SECTIONS (tests memcheck bench peers python checkpoint large parallel)"; exit 2 ;;
  esac
done
has() { [[ "$sections" == *" $1 "* ]]; }
presets=${@:-deepseek-r1}
log="$out/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee -a "$log"

run_test() {  # name [args...]
  local t=$1; shift
  echo "=== $t $*"
  local start=$(date +%s)
  timeout ${FP4MOE_TEST_TIMEOUT:-300} "$bin/$t" "$@" 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | tail -40
  echo "=== $t exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
}

if has tests; then
  for t in ${FP4MOE_TESTS:-test_format test_routing test_reference test_api test_io test_parallel test_format_gpu \
           test_routing_gpu test_moe_gpu test_pipeline_probe_gpu}; do
    run_test $t
  done >> "$log" 2>&1
  grep -E "^=== .* exit" "$log"
fi

if has memcheck; then
  {
    specs=${FP4MOE_MEMCHECK_SPECS:-"test_format_gpu:-*Exhaustive*:*MatchesHardware* test_routing_gpu:*"}
    set -f  # the filters hold '*'
    for spec in $specs \
                "test_moe_gpu:${FP4MOE_MEMCHECK_FILTER:-*deepseek*w4a16*:*gpt_oss_20b*:*Hostile*:*Rejects*:*OutOfRange*:*Uploaded*:*EveryCompiled*:*SplitK*:*Tail*:*Plan*:*GemmOverlap*AlsoBackToBack*}"; do
      t=${spec%%:*}; filter=${spec#*:}
      echo "=== memcheck $t ($filter)"
      timeout ${FP4MOE_MEMCHECK_TIMEOUT:-600} compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/$t" --gtest_filter="$filter" 2>&1 | \
        grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid|out of bounds" | tail -8
      echo "=== memcheck $t exit ${PIPESTATUS[0]}"
    done
    set +f
    if [ "${FP4MOE_RACECHECK:-0}" = 1 ]; then
      # the pipeline protocol alone (tests/test_pipeline_probe_gpu.cu: the kernels' every-thread
      # release; the tool flags its one-lane variants), then the kernels
      set -f
      for spec in "test_pipeline_probe_gpu:*EveryLane*" \
                  "test_moe_gpu:${FP4MOE_RACECHECK_FILTER:-*deepseek_r1_w4a16_sm90*:*Hostile*sm90*:*EveryCompiled*:*Tail*:*GemmOverlap*AlsoBackToBack*}"; do
        t=${spec%%:*}; filter=${spec#*:}
        echo "=== racecheck $t ($filter)"
        timeout ${FP4MOE_RACECHECK_TIMEOUT:-600} compute-sanitizer --tool racecheck --error-exitcode 3 "$bin/$t" \
          --gtest_filter="$filter" 2>&1 | grep -vE '^\[ +(RUN|OK) +\]' | awk 'NR <= 40 || /SUMMARY/'  # (not head: SIGPIPE)
        echo "=== racecheck $t exit ${PIPESTATUS[0]}"
      done
      set +f
    fi
  } >> "$log" 2>&1
  grep -E "SUMMARY|memcheck.*exit|racecheck.*exit" "$log"
fi

tokens=${FP4MOE_TOKENS:-1,8,32,128,512,2048,8192}
# Each token count's routings (every input set the bench times; it reports the median set's touched
# experts), for the peers to time the same assignments. Outside $OUT: small files per preset, token
# count and set.
routing_dir=${FP4MOE_ROUTING_DIR:-/tmp/fp4moe-routing}
if has bench; then
  rm -rf "$routing_dir" && mkdir -p "$routing_dir"
  for preset in $presets; do
    timeout ${FP4MOE_BENCH_TIMEOUT:-300} stdbuf -oL "$bin/fp4moe-bench" --preset "$preset" \
      ${FP4MOE_BENCH_ARGS:---routing random --tokens $tokens --check --verbose} --json "$out/bench_${preset}.json" \
      --dump-routing "$routing_dir" 2>&1 | \
      tee -a "$out/bench.log" | grep -vE "^ +(gemm|config|kernel)"
    echo "=== bench $preset exit ${PIPESTATUS[0]}" | tee -a "$out/bench.log"
  done
fi

if has peers; then
  for preset in $presets; do
    # fp4moe-bench's routing when the bench section ran here, else the peers draw their own
    routing_args=""
    if has bench; then routing_args="--routing-dir $routing_dir"; else echo "peers $preset: own routing (no bench section)"; fi
    # vLLM's Marlin MoE GEMMs too when staged (FP4MOE_STAGE_MARLIN=1)
    [ -f gpubin/marlin/libfp4moe_marlin_peer.so ] && routing_args="$routing_args --marlin-lib gpubin/marlin/libfp4moe_marlin_peer.so"
    # FP4MOE_PEERS_ARGS: more peers_torch.py arguments (e.g. --humming), FP4MOE_PEERS_TIMEOUT its limit
    timeout ${FP4MOE_PEERS_TIMEOUT:-300} python3 bench/peers_torch.py --preset "$preset" --tokens "$tokens" \
      --json "$out/peers_${preset}.json" $routing_args ${FP4MOE_PEERS_ARGS:-} >> "$out/bench.log" 2>&1
    echo "=== peers $preset exit $?" | tee -a "$out/bench.log"
    python3 bench/compare.py "$out/bench_${preset}.json" "$out/peers_${preset}.json" 2>&1 | tee -a "$out/bench.log"
  done
fi

if has python; then
  {
    echo "=== python build"; cmake --version | head -1; python3 --version
    start=$(date +%s)
    mkdir -p .deps/cutlass && tar -C .deps/cutlass -xzf gpubin/cutlass.tar.gz
    # build dependencies into the machine's environment from the carried wheels, then build in it
    python3 -m pip install -q --no-index --find-links gpubin/pywheels scikit-build-core==1.1.2 nanobind==3.1.0 pytest 2>&1 | tail -20
    # Built with the image's default CXX (/opt/gcc) the module carried its own libstdc++ and
    # segfaulted formatting its first error message (seen on the H200 image): use the system g++.
    [ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++
    CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 400 python3 -m pip install --no-build-isolation --no-deps --no-index \
      --force-reinstall -Ccmake.build-type=Release . > /tmp/pip-build.log 2>&1
    rc=$?
    tail -40 /tmp/pip-build.log
    echo "=== python build exit $rc in $(( $(date +%s) - start )) s"
    if [ "${FP4MOE_PY_PROBE:-0}" = 1 ]; then
      # an fp4moe error raised through the binding, alone (segfaulted in pytest on this image once)
      probe='import fp4moe
p = fp4moe.Problem(hidden_size=256, intermediate_size=128, num_experts=8, top_k=2)
try:
    p.replace(hidden_size=100).validate()
except fp4moe.InvalidArgumentError as e:
    print("probe ok:", e)'
      (cd /tmp && timeout 60 python3 -X faulthandler -c "$probe" 2>&1 | tail -5; echo "=== probe exit ${PIPESTATUS[0]}")
      (cd /tmp && FP4MOE_NO_TORCH=1 timeout 60 python3 -c "$probe" 2>&1 | tail -3; echo "=== probe (no torch) exit ${PIPESTATUS[0]}")
      (cd /tmp && timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 -c "$probe" 2>&1 | grep -E "^#|signal|probe ok" | head -30)
      ext=$(python3 -c 'import fp4moe._ext as e; print(e.__file__)' 2>/dev/null)
      ldd "$ext" 2>&1 | grep -E "stdc|gcc_s|cudart"
      which g++ c++ gcc; g++ --version | head -1; echo "CXX=${CXX:-} CC=${CC:-}"; grep -E "CMAKE_CXX_COMPILER:" build/pip/*/CMakeCache.txt
    fi
    pytests="test_gpu.py test_cpu.py"
    # the 2-GPU ParallelMoE tests (they skip themselves with fewer GPUs; run only where they can run)
    [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && pytests="$pytests test_parallel_gpu.py"
    only=()
    if [ -n "${FP4MOE_PYTEST_K:-}" ]; then pytests="test_gpu.py"; only=(-k "$FP4MOE_PYTEST_K"); fi
    for t in $pytests; do
      (cd /tmp && timeout 300 python3 -X faulthandler -m pytest "$root/tests/python/$t" -q -rfEs "${only[@]}" 2>&1 | grep -vE "^  File .*(_pytest|pluggy)|^DEBUG " | tail -40; exit ${PIPESTATUS[0]})
      echo "=== pytest $t${FP4MOE_PYTEST_K:+ -k $FP4MOE_PYTEST_K} exit $?"
    done
    if [ -z "${FP4MOE_PYTEST_K:-}" ]; then
      timeout 120 python3 examples/replace_moe_block.py --compile 2>&1 | tail -10
      echo "=== example exit ${PIPESTATUS[0]}"
    fi
  } >> "$out/python.log" 2>&1
  grep -E "^=== |passed|failed" "$out/python.log"
fi

if has checkpoint; then
  {
    ck=/tmp/fp4moe-ck
    rm -rf $ck && mkdir -p $ck
    for spec in "deepseek-v3:modelopt:deepseek-r1" "qwen3-moe:compressed-tensors:qwen3-30b-a3b" \
                "llama4:modelopt-fused:llama4-scout" "gpt-oss:gpt-oss:gpt-oss-20b"; do
      IFS=: read -r model conv preset <<< "$spec"
      echo "=== checkpoint $model $conv ($preset scaled)"
      mkdir -p $ck/$model && "$bin/fp4moe-make-checkpoint" --out $ck/$model --model $model --convention $conv --preset $preset \
        --scale 8 --layers 2 --shards 2 --index 2>&1 | tail -2
      echo "=== fp4moe-make-checkpoint $model exit ${PIPESTATUS[0]}"
      timeout 120 "$bin/fp4moe-check" --checkpoint $ck/$model --layer 1 --tokens 200 2>&1 | tail -12
      echo "=== fp4moe-check $model exit ${PIPESTATUS[0]}"
      timeout 120 "$bin/fp4moe-bench" --checkpoint $ck/$model --layer 1 --tokens 1,128 --check 2>&1 | tail -6
      echo "=== fp4moe-bench --checkpoint $model exit ${PIPESTATUS[0]}"
    done
  } >> "$log" 2>&1
  grep -E "^=== (fp4moe|checkpoint)" "$log"
fi

if has large; then
  # Routed pairs x H (the permuted activations, GEMM2's output) or x I (GEMM1's output) past 2^31
  # elements: a 32-bit offset anywhere would fail --check, whose tokens include the batch's last.
  # Few iterations and no warm-up time: correctness, not the tables' power state.
  for spec in "deepseek-r1 40000 w4a16" "deepseek-r1 40000 w4a4" "qwen3-30b-a3b 150000 w4a16" \
              "gpt-oss-120b 200000 w4a16" "mixtral-8x7b 80000 w4a16" "llama4-maverick 430000 w4a16"; do
    read -r preset T mode <<< "$spec"
    timeout ${FP4MOE_LARGE_TIMEOUT:-300} "$bin/fp4moe-bench" --preset "$preset" --tokens "$T" --mode "$mode" \
      --routing random --check --check-tokens 64 --iters 3 --warmup 1 --warmup-ms 0 --verbose \
      --json "$out/large_${preset}_$mode.json" 2>&1
    echo "=== large $preset T=$T $mode exit $?"
  done >> "$out/large.log" 2>&1
  grep -E "^=== large|pass \(|fail" "$out/large.log"
fi

if has parallel; then
  {
    nvidia-smi topo -m 2>&1 | head -5
    run_test test_parallel_gpu
    timeout ${FP4MOE_PARALLEL_TIMEOUT:-400} stdbuf -oL "$bin/fp4moe-bench-parallel" --nproc 2 ${FP4MOE_PARALLEL_ARGS:---preset deepseek-r1 --tokens 1,128,1024,8192} 2>&1
    echo "=== fp4moe-bench-parallel exit $?"
  } >> "$out/parallel.log" 2>&1
  grep -E "^=== " "$out/parallel.log"
fi
if ls "$out"/*.json > /dev/null 2>&1; then (cd "$out" && tar czf 00-json.tgz ./*.json); fi
# every "=== ... exit N" line of this run's logs; any N != 0 fails the run
if cat "$out"/*.log 2>/dev/null | grep -E "^=== .* exit [0-9]+" | grep -vqE " exit 0( in [0-9]+ s)?$"; then
  echo "gpu-check: FAILED steps:"; cat "$out"/*.log | grep -E "^=== .* exit [0-9]+" | grep -vE " exit 0( in [0-9]+ s)?$"
  exit 1
fi
echo "gpu-check: every step it ran passed"
