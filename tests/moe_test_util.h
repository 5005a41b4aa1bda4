// Helpers for MoE-level tests: inputs, the host reference on GPU routing, error table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fp4moe/moe.h"
#include "reference/moe_reference.h"
#include "test_util.h"

namespace fp4moe::testing {

// Normalized L2 error limits of a GPU forward against the fp64 reference, per mode. Why:
//  - w4a16: the kernels round the intermediate (as the reference does) and the weighted expert
//    outputs to bf16 before the fp32 combine, and the output to bf16: a few bf16 ulps (2^-9 each)
//    in the norm; 8e-3 leaves room for the fp32 vs fp64 summation over K.
//  - w4a4: the intermediate is NVFP4-quantized from fp32 values (GPU) vs fp64 values (reference);
//    an element near a rounding boundary can land one e2m1 step apart, so the bound is looser.
inline double tolerance(Mode mode) { return mode == Mode::kW4A4 ? 3e-2 : 8e-3; }

inline std::vector<uint16_t> random_hidden(std::mt19937_64& rng, int64_t T, int64_t H) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> v(size_t(T * H));
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

inline std::vector<float> random_logits(std::mt19937_64& rng, int64_t T, int E) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(T) * E);
  for (auto& x : v) x = d(rng);
  return v;
}

// The sum of |x| over the first n bf16 values of v (all of them by default): the non-zero-norm check.
inline double abs_sum_bf16(const std::vector<uint16_t>& v, size_t n = SIZE_MAX) {
  const size_t end = std::min(n, v.size());
  double s = 0;
  for (size_t i = 0; i < end; ++i) s += std::fabs(double(bf16_to_float(v[i])));
  return s;
}

inline std::vector<float> bf16_to_floats(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

}  // namespace fp4moe::testing
