// Dummy (random, valid) FP4 weights as a pure function of (problem, seed, tensor, index), shared by
// the host generator (make_random_weights) and the device generator (make_dummy_weights_gpu), so a
// reference check can regenerate any expert on the host without copying weights back.
//
// Codes are uniform over all 16 e2m1 codes (each nibble of a random byte). NVFP4 block scales are
// uniform e4m3 bytes in [0x28, 0x48] (0.25 .. 4), and the per-expert global scale makes the weight
// standard deviation about 1/sqrt(K), so unit-variance inputs give unit-variance outputs. MXFP4
// scales are 2^-8 .. 2^-6 (e8m0 119 .. 121).
#pragma once

#include <cmath>
#include <cstdint>

#include "src/common/hash_rng.h"

namespace fp4moe::detail {

enum DummyTensor : uint64_t {
  kDummyW13 = 1, kDummyW13Scale, kDummyW13Scale2, kDummyW2, kDummyW2Scale, kDummyW2Scale2,
  kDummyW13Bias, kDummyW2Bias, kDummyA13Scale2, kDummyA2Scale2, kDummyRoutingBias,
};

FP4MOE_HD uint8_t dummy_code_byte(uint64_t seed, uint64_t tensor, uint64_t index) {
  return uint8_t(hash3(seed, tensor, index) >> 24);
}

FP4MOE_HD uint8_t dummy_scale_byte(uint64_t seed, uint64_t tensor, uint64_t index, bool mxfp4) {
  const uint64_t h = hash3(seed, tensor, index) >> 32;
  return mxfp4 ? uint8_t(119 + h % 3) : uint8_t(0x28 + h % 33);
}

// Decode-convention global scale for an expert whose GEMM reduces over k elements: the codes have
// RMS ~2.9 and the scales ~1.6, so 1/(4.6 sqrt(k)) gives weights of RMS ~1/sqrt(k).
FP4MOE_HD float dummy_scale_2(uint64_t seed, uint64_t tensor, uint64_t expert, int64_t k) {
  const float jitter = hash_uniform(hash3(seed, tensor, expert), 0.9f, 1.1f);
  return jitter / (4.6f * sqrtf(float(k)));
}

FP4MOE_HD float dummy_uniform(uint64_t seed, uint64_t tensor, uint64_t index, float lo, float hi) {
  return hash_uniform(hash3(seed, tensor, index), lo, hi);
}

// Per-expert scales (global expert id) that code outside the generators needs on the host: GEMM1's
// weight global scale (NVFP4) and, in w4a4, its input global scale (inputs are ~N(0,1), amax ~5:
// amax / 2688). make_random_weights uses these; make_dummy_weights (weights.cu) spells out the same.
FP4MOE_HD float dummy_w13_scale_2(uint64_t seed, uint64_t expert, int64_t hidden) {
  return dummy_scale_2(seed, kDummyW13Scale2, expert, hidden);
}
FP4MOE_HD float dummy_a13_scale_2(uint64_t seed, uint64_t expert) {
  return dummy_uniform(seed, kDummyA13Scale2, expert, 4.0f, 6.0f) / 2688.0f;
}

}  // namespace fp4moe::detail
