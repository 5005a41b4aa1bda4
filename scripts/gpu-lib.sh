# Steps for a session's GPU run script, to source from it (bench/results/runs/*.sh) instead of
# copying the same preamble into each: sessions 16-18's scripts repeated it, which
# `duplicates --change` listed every time. Run from the repository root on the GPU machine, over
# what scripts/stage-gpu.sh packed into gpubin/. Each step appends to $log (default $OUT/run.txt)
# with its exit status and seconds, and keeps its full output under $OUT; gpu_pack tars what is
# there (the device tool returns at most 8 files). Usage:
#
#   source scripts/gpu-lib.sh
#   gpu_init
#   gpu_tests || { gpu_pack all; exit 1; }     # gpubin/bin/test_moe_gpu
#   gpu_build_tests a b                        # gpubin/{a,b}/test_moe_gpu (FP4MOE_STAGE_MORE_TESTS=1)
#   gpu_check gpubin/bin/fp4moe-bench deepseek-r1:1,8,128 qwen3-30b-a3b:8   # --check, each preset
#   gpu_ab fast gpubin/bin/fp4moe-bench 200 deepseek-r1:1,8,32,128 qwen3-30b-a3b:8
#   gpu_variants 2 "deepseek-r1:8,2048 qwen3-30b-a3b:8" bin bound3 pf8  # builds in turn, each vs the first
#   gpu_trace deepseek-r1:32,128               # gpubin/trace/fp4moe-bench (FP4MOE_STAGE_TRACE=1)
#   gpu_sanitize memcheck 200; gpu_sanitize racecheck 200
#   gpu_python                                 # the Python package built there, pytest, the example
#   gpu_deepseek_sweep                         # the first of them: DeepSeek-R1 with the peers (~105 s)
#   gpu_humming_env                            # the Humming peer's wheels (FP4MOE_STAGE_HUMMING=1)
#   gpu_triton_env                             # the triton_kernels peer (FP4MOE_STAGE_TRITON=1)
#   gpu_peer_presets gptoss 1,8,128 200 --triton gpt-oss-120b gpt-oss-20b  # fp4moe-bench + every peer
#   gpu_tables                                 # the README's tables (~300 s)
#   gpu_pack all
#
# env: GPU_VARIANTS_ARGS (more fp4moe-bench arguments for gpu_variants, e.g. --clocks),
# GPU_AB_REPS (repetitions of each A/B, default 3), GPU_AB_BASE_BIN (default
# gpubin/base/fp4moe-bench), GPU_SANITIZE_FILTER (default: the plan, hostile-routing, overlap,
# split-K and DeepSeek-R1 tests, ~140-170 s under racecheck), GPU_SANITIZE_BIN (default
# gpubin/bin/test_moe_gpu; e.g. gpubin/base/test_moe_gpu, staged with FP4MOE_STAGE_MORE_TESTS=1)
# and GPU_SANITIZE_TAG (a suffix for its output file and log line, to run the same tool twice).
out=${OUT:-/tmp/fp4moe-out}
log=${log:-$out/run.txt}
mkdir -p "$out"

# _gpu_step NAME RC SECONDS: one line of the log per step
_gpu_step() { echo "=== $1 exit $2 ($3 s)" >> "$log"; }

# The binaries (gpubin/bin from its tarball, the gzipped extra builds), NCCL without NVLink
# multicast, and the GPU's name, clock limit and power limit at the top of the log. Call it first:
# it empties $OUT, which on a device machine can hold what earlier runs left there (session 23
# found other sessions' files from the day before in it, which gpu_pack then packed with its own).
gpu_init() {
  case "$(cd "$out" && pwd -P)" in
    / | "$(pwd -P)" | "$HOME") echo "gpu_init: OUT=$out is not a scratch folder; not emptying it" >&2; return 1 ;;
  esac
  find "$out" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  [ -d gpubin/bin ] || tar -C gpubin -xzf gpubin/bin.tar.gz
  bash scripts/gpu-unpack-builds.sh
  export NCCL_NVLS_ENABLE=0
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> "$log" 2>&1
}

# _gpu_test_bin BIN FILE STEP TIMEOUT: one test binary's run into $OUT/FILE, a log step named STEP,
# the last two lines, and on failure the failing tests' output. Returns the binary's status.
_gpu_test_bin() {
  local s=$SECONDS rc
  timeout "$4" "$1" > "$out/$2" 2>&1
  rc=$?
  _gpu_step "$3" $rc $((SECONDS - s))
  tail -2 "$out/$2" >> "$log"
  [ $rc = 0 ] || grep -B3 -A12 "Failure\|FAILED" "$out/$2" | head -60 >> "$log"
  return $rc
}

# gpu_tests [TIMEOUT]: every test of gpubin/bin/test_moe_gpu; on failure the failing tests' output
# goes to the log. Returns the test binary's status.
gpu_tests() { _gpu_test_bin gpubin/bin/test_moe_gpu test_moe_gpu.txt test_moe_gpu "${1:-100}"; }

# gpu_build_tests NAME...: test_moe_gpu of each extra build (gpubin/NAME, staged with
# FP4MOE_STAGE_MORE_TESTS=1), 150 s each, into $OUT/tests_NAME.txt, as gpu_tests. Returns the number
# of builds that failed.
gpu_build_tests() {
  local name failed=0
  for name in "$@"; do
    _gpu_test_bin "gpubin/$name/test_moe_gpu" "tests_$name.txt" "test_moe_gpu $name" 150 || failed=$((failed + 1))
  done
  return $failed
}

# gpu_ab NAME HEAD_BIN TIMEOUT PRESET:TOKENS...: scripts/gpu-ab.sh of HEAD_BIN against
# GPU_AB_BASE_BIN (extra arguments: FP4MOE_AB_BASE_ARGS / FP4MOE_AB_HEAD_ARGS as there), its files
# in $OUT/ab_NAME and its table in the log.
gpu_ab() {
  local name=$1 bin=$2 t=$3 s=$SECONDS rc
  shift 3
  OUT=$out/ab_$name FP4MOE_AB_REPS=${GPU_AB_REPS:-3} FP4MOE_AB_HEAD_BIN=$bin \
    FP4MOE_AB_BASE_BIN=${GPU_AB_BASE_BIN:-gpubin/base/fp4moe-bench} \
    timeout "$t" scripts/gpu-ab.sh "$@" > "$out/ab_${name}_log.txt" 2>&1
  rc=$?
  _gpu_step "ab $name" $rc $((SECONDS - s))
  cat "$out/ab_$name/ab/summary.md" >> "$log" 2>/dev/null
  # (a cut A/B leaves its JSON files: bench/ab_summary.py on $OUT/ab_NAME/ab makes the table)
  return $rc
}

# gpu_variants REPS "PRESET:T,T ..." BASE NAME...: several builds of fp4moe-bench measured in turn on
# the same GPU (gpubin/NAME/fp4moe-bench; "bin" is gpubin/bin/), REPS rounds, each round every build
# over every preset, then a table of each NAME against BASE (bench/ab_summary.py). The variants of
# FP4MOE_STAGE_VARIANTS (e.g. the bound experiments) are measured this way (session 27's runs 2-5).
# One spec per preset (their JSON files are named by preset).
gpu_variants() {
  local reps=$1 specs=$2 base=$3 s=$SECONDS status=0 rep b bin spec p f rc
  shift 3
  for rep in $(seq 1 "$reps"); do
    for b in "$base" "$@"; do
      bin=gpubin/$b/fp4moe-bench
      mkdir -p "$out/v_$b"
      for spec in $specs; do
        p=${spec%%:*}
        # (word splitting of GPU_VARIANTS_ARGS on purpose: a list of arguments)
        # shellcheck disable=SC2086
        timeout 120 "$bin" --preset "$p" --tokens "${spec#*:}" --routing random --verbose ${GPU_VARIANTS_ARGS:-} \
          --json "$out/v_$b/head_${p}_$rep.json" > "$out/v_$b/head_${p}_$rep.log" 2>&1
        rc=$?
        echo "=== $b $p rep $rep exit $rc" >> "$log"
        [ $rc = 0 ] || status=1
      done
    done
  done
  for b in "$@"; do
    for f in "$out/v_$base"/head_*.json; do [ -e "$f" ] && cp "$f" "$out/v_$b/base_${f##*/head_}"; done
    echo "--- $b against $base" >> "$log"
    python3 bench/ab_summary.py "$out/v_$b" >> "$log" 2>&1
  done
  _gpu_step "variants $base $*" $status $((SECONDS - s))
  return $status
}

# gpu_trace PRESET:TOKENS... : the trace build's timeline and per-tile cycles, one preset each.
gpu_trace() {
  local spec s rc
  for spec in "$@"; do
    s=$SECONDS
    timeout 60 gpubin/trace/fp4moe-bench --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --verbose \
      --trace --json "$out/trace_${spec%%:*}.json" > "$out/trace_${spec%%:*}.txt" 2>&1
    rc=$?
    _gpu_step "trace $spec" $rc $((SECONDS - s))
    grep -E "^ +[0-9]+ |gemm|cycles|path" "$out/trace_${spec%%:*}.txt" >> "$log"
  done
}

# gpu_sanitize TOOL [TIMEOUT]: compute-sanitizer memcheck or racecheck on gpubin/bin/test_moe_gpu.
gpu_sanitize() {
  local tool=$1 t=${2:-200} s=$SECONDS rc
  local filter=${GPU_SANITIZE_FILTER:-*Plan*:*HostileRouting*:*GemmOverlap*AlsoBackToBack*:*SplitK*:*deepseek*}
  echo "=== $tool on $filter" >> "$log"
  local bin=${GPU_SANITIZE_BIN:-gpubin/bin/test_moe_gpu} name=${tool}${GPU_SANITIZE_TAG:+_$GPU_SANITIZE_TAG}
  timeout "$t" compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin" --gtest_filter="$filter" \
    > "$out/$name.txt" 2>&1
  rc=$?
  _gpu_step "$name ($bin)" $rc $((SECONDS - s))
  grep -E "SUMMARY|PASSED|FAILED|Error|hazard|OK \]" "$out/$name.txt" | head -12 >> "$log"
  return $rc
}

# gpu_python [TIMEOUT]: gpu-check's python section (staged with the Python parts: the package built
# there, test_gpu.py and test_cpu.py, the example; FP4MOE_PYTEST_K for a subset) into $OUT/check, its
# summary lines to the log (session 36's run scripts spelled this out). Returns gpu-check's status.
gpu_python() {
  local s=$SECONDS rc
  FP4MOE_SECTIONS="python" FP4MOE_BIN=gpubin/bin OUT=$out/check timeout "${1:-300}" scripts/gpu-check.sh \
    > "$out/check_log.txt" 2>&1
  rc=$?
  _gpu_step "gpu-check python${FP4MOE_PYTEST_K:+ -k $FP4MOE_PYTEST_K}" $rc $((SECONDS - s))
  grep -E "^=== |passed|failed|gpu-check|FAILED|FP4MOE_TEST_SEED" "$out/check_log.txt" >> "$log"
  return $rc
}

# gpu_check BIN PRESET:TOKENS...: `fp4moe-bench --check --verbose` of BIN (e.g. gpubin/bin/fp4moe-bench
# or an extra build's) at each preset's tokens, 60 s each, into $OUT/check_<build>.txt; one log step
# whose status is the number of failed presets, their names, and the table rows (pass/fail).
gpu_check() {
  local bin=$1 s=$SECONDS failed=0 spec name
  shift
  name=$(basename "$(dirname "$bin")")
  for spec in "$@"; do
    timeout 60 "$bin" --preset "${spec%%:*}" --tokens "${spec#*:}" --routing random --check --verbose \
      >> "$out/check_$name.txt" 2>&1 || { failed=$((failed + 1)); echo "=== --check $spec FAILED ($bin)" >> "$log"; }
  done
  _gpu_step "check $name" $failed $((SECONDS - s))
  grep -E "pass \(|fail" "$out/check_$name.txt" | head -24 >> "$log"
  return $failed
}

# gpu_deepseek_sweep [TIMEOUT]: the first of the README's tables (gpu_tables below), the DeepSeek-R1
# sweep (T = 1-8192) with --check and the torch peers (whole layers and their GEMMs alone), into
# $OUT/tables_deepseek; ~105 s on a warm H200 (session 37's run 2, which spelled it out). Marlin
# too when staged, Humming with `export FP4MOE_PEERS_ARGS=--humming` after gpu_humming_env (give
# it a longer TIMEOUT; gpu_tables gives 360 s). Returns gpu-check's status.
gpu_deepseek_sweep() {
  local s=$SECONDS rc
  FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=1,8,32,128,512,2048,4096,8192 OUT=$out/tables_deepseek \
    timeout "${1:-240}" scripts/gpu-check.sh deepseek-r1 > "$out/tables_deepseek_log.txt" 2>&1
  rc=$?
  _gpu_step "tables: deepseek-r1 sweep with peers" $rc $((SECONDS - s))
  grep -E "^\| |^ +[0-9]+ |ceilings" "$out/tables_deepseek_log.txt" >> "$log"
  return $rc
}

# gpu_tables: the README's tables as session 20's run 6 made them (its script repeated session
# 18-19's), ~300 s on an H200: the DeepSeek-R1 sweep with --check and the torch peers, every other
# preset with --check, DeepSeek-R1 w4a4. Each part's files go to $OUT/tables_*, its table lines to
# the log. (Written after run 6, from its script; first used by the next table run.)
gpu_tables() {
  gpu_deepseek_sweep 360
  local s=$SECONDS
  FP4MOE_SECTIONS=bench FP4MOE_TOKENS=1,8,16,128,4096,16384 OUT=$out/tables_presets timeout 300 \
    scripts/gpu-check.sh qwen3-30b-a3b qwen3-235b-a22b gpt-oss-120b gpt-oss-20b llama4-scout llama4-maverick \
    mixtral-8x7b > "$out/tables_presets_log.txt" 2>&1
  _gpu_step "tables: the presets" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |preset|ceilings|=== bench" "$out/tables_presets_log.txt" >> "$log"
  s=$SECONDS
  mkdir -p "$out/tables_w4a4"
  timeout 90 gpubin/bin/fp4moe-bench --preset deepseek-r1 --mode w4a4 --routing random --tokens 1,8,128,2048,8192 \
    --check --json "$out/tables_w4a4/bench_deepseek-r1_w4a4.json" > "$out/tables_w4a4_log.txt" 2>&1
  _gpu_step "tables: deepseek-r1 w4a4" $? $((SECONDS - s))
  grep -E "^ +[0-9]+ |ceilings" "$out/tables_w4a4_log.txt" >> "$log"
}

# gpu_humming_env: installs gpubin/humming-wheels (FP4MOE_STAGE_HUMMING=1) into /tmp/fp4moe-humming
# and exports PYTHONPATH and CUDA_HOME for the peers' --humming; logs the version or the failure.
gpu_humming_env() {
  local s=$SECONDS rc
  # (--upgrade: a folder left by an earlier call is replaced, not kept; the JIT compiler is the
  # image's CUDA toolkit, where vLLM's humming-kernels[cu13] would bring pip's nvcc)
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/fp4moe-humming \
    gpubin/humming-wheels/*.whl > "$out/humming_install.txt" 2>&1
  rc=$?
  export PYTHONPATH=/tmp/fp4moe-humming${PYTHONPATH:+:$PYTHONPATH}
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  [ $rc = 0 ] && { python3 -c "import humming; print('humming', humming.__version__)" >> "$out/humming_install.txt" 2>&1; rc=$?; }
  _gpu_step "humming install" $rc $((SECONDS - s))
  tail -3 "$out/humming_install.txt" >> "$log"
  return $rc
}

# gpu_triton_env: triton_kernels (staged with FP4MOE_STAGE_TRITON=1) on PYTHONPATH for the peers'
# --triton; it runs on the image's Triton, whose version goes to the log.
gpu_triton_env() {
  local s=$SECONDS rc
  [ -d gpubin/triton-peer/triton_kernels ] || { _gpu_step "triton_kernels: not staged (FP4MOE_STAGE_TRITON=1)" 1 0; return 1; }
  export PYTHONPATH=$PWD/gpubin/triton-peer${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import triton, triton_kernels.matmul_ogs; print('triton', triton.__version__, 'triton_kernels from', open('gpubin/triton-peer/triton_kernels/FROM').read().strip())" \
    > "$out/triton_env.txt" 2>&1
  rc=$?
  _gpu_step "triton_kernels import" $rc $((SECONDS - s))
  tail -3 "$out/triton_env.txt" >> "$log"
  return $rc
}

# gpu_peer_presets NAME TOKENS TIMEOUT PEERS_ARGS PRESET...: scripts/gpu-check.sh's bench and peers
# sections on the presets at TOKENS (fp4moe-bench --check, then peers_torch.py with PEERS_ARGS, e.g.
# --humming, and --triton for gpt-oss only; Marlin when staged), the peers limited to
# TIMEOUT seconds. Files under $OUT/NAME; the log gets the tables and each row's extra-peer fields
# (checks, fitted constants or errors, times). FP4MOE_BENCH_ARGS replaces fp4moe-bench's arguments
# (gpu-check.sh), e.g. "--routing model --tokens T --check --verbose" for its own router. Session
# 39's run scripts had these lines inline (runs 1-7) before it was written.
gpu_peer_presets() {
  [ $# -ge 5 ] || { echo "gpu_peer_presets NAME TOKENS TIMEOUT PEERS_ARGS PRESET...: got '$*'" >&2; return 2; }
  local name=$1 tokens=$2 limit=$3 peers_args=$4 s=$SECONDS rc
  shift 4
  FP4MOE_SECTIONS="bench peers" FP4MOE_TOKENS=$tokens FP4MOE_PEERS_TIMEOUT=$limit FP4MOE_PEERS_ARGS=$peers_args \
    OUT=$out/$name timeout $((limit + 60)) scripts/gpu-check.sh "$@" > "$out/${name}_log.txt" 2>&1
  rc=$?
  _gpu_step "$name: $* at T=$tokens" $rc $((SECONDS - s))
  grep -E "^\| |^ +[0-9]+ |ceilings|=== " "$out/${name}_log.txt" >> "$log"
  grep -h '^{"T"' "$out/$name/bench.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    cells = [str(r["T"])]
    for p in ("triton", "marlin", "humming"):
        keys = sorted(k for k in r if k.startswith(p + "_"))
        if keys:
            cells.append(p + ": " + ", ".join(f"{k[len(p) + 1:]}={r[k]}" for k in keys))
    print(" | ".join(cells))
' >> "$log" 2>&1
  grep -iE "unavailable|Traceback|Error" "$out/$name/bench.log" | grep -v '^{' | head -20 >> "$log"
  return $rc
}

# gpu_pack NAME: everything under $OUT but the log into $OUT/NAME.tgz (then removed).
gpu_pack() {
  local name=$1 items
  items=$(cd "$out" && ls -A | grep -vxF -e "$(basename "$log")" -e "$name.tgz" | grep -v '\.tgz$')
  [ -n "$items" ] || return 0
  # (word splitting on purpose: the names are this library's own, without spaces)
  # shellcheck disable=SC2086
  (cd "$out" && tar czf "$name.tgz" $items && rm -rf $items)
}
