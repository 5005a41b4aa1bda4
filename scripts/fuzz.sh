#!/usr/bin/env bash
# Builds the safetensors/JSON/config fuzzer (fuzz/safetensors_fuzz.cpp) with Debian's clang, libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs it on the committed seed corpus.
#   scripts/fuzz.sh [seconds=600] [more libFuzzer flags...]
# New inputs go to build-fuzz/corpus (fuzz/corpus stays the small committed seed set); a crash, leak
# or hang stops the run with a non-zero exit and leaves its input in build-fuzz/.
# Not part of scripts/test.sh: it runs for minutes by design.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
shift || true

# libFuzzer's runtime (libclang_rt.fuzzer) lives in libclang-rt-14-dev on Debian 12.
if ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  echo "fuzz: installing libclang-rt-14-dev (libFuzzer runtime)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null
fi
cxx=$(command -v clang++-14 || command -v clang++)

out="$root/build-fuzz"
mkdir -p "$out/corpus"
"$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I "$root/include" -I "$root" \
  "$root/fuzz/safetensors_fuzz.cpp" "$root/src/io/safetensors.cpp" "$root/src/io/json.cpp" \
  "$root/src/io/checkpoint_config.cpp" "$root/src/common/status.cpp" \
  "$root/src/moe/validate.cpp" "$root/src/moe/problem.cpp" "$root/src/routing/routing_cpu.cpp" \
  -o "$out/safetensors_fuzz"

cd "$out"
# -timeout: seconds one input may take before it counts as a hang; -rss_limit_mb: a parse that
# balloons memory is a finding too. max_len 64 KiB covers headers with hundreds of tensors.
exec ./safetensors_fuzz corpus "$root/fuzz/corpus" \
  -dict="$root/fuzz/safetensors.dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 "$@"
