// Counter-based random numbers, identical on host and device: value = f(seed, stream, index).
// Lets dummy weights be generated on the GPU and regenerated on the host for a reference check,
// byte for byte, without copying them back.
#pragma once

#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::detail {

FP4MOE_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

FP4MOE_HD uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(seed ^ (stream * 0xD1B54A32D192ED03ull)) ^ index);
}

// Uniform in [lo, hi) from 24 random bits.
FP4MOE_HD float hash_uniform(uint64_t h, float lo, float hi) {
  const float u = float(uint32_t(h >> 40)) * (1.0f / 16777216.0f);
  return add_rn(lo, mul_rn(u, (hi - lo)));
}

}  // namespace fp4moe::detail
