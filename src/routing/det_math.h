// Deterministic scalar math and orderings shared by the routing CPU reference (routing_cpu.cpp) and
// the routing kernels (routing_gpu.cu), so that both select the same experts and produce the same
// weight bits.
//
// Every float operation here is one whose IEEE result is fully determined: explicit fmaf(), and
// mul_rn/add_rn/div_rn from numerics.h (on the device they are __fmul_rn & co., which nvcc never
// contracts into an FMA). No libm exp, no __expf: their results differ between host and device.
#pragma once

#include <cmath>
#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::routing {

// ---- Limits ------------------------------------------------------------------------------------
// The kernels keep one token's scores in the registers of one warp (kMaxExperts / 32 per lane) and
// the k winners in lanes 0..k-1; validate() rejects configurations beyond these.
inline constexpr int kMaxExperts = 512;
inline constexpr int kMaxTopK = 16;

// ---- exp / sigmoid -----------------------------------------------------------------------------

// Largest float whose exp is finite: 0x42b17217 = 88.72283172607421875 (ln(FLT_MAX) = 88.722839...).
inline constexpr float kExpOverflowThreshold = 0x1.62e42ep+6f;
// exp(-104) < 2^-150, half the smallest subnormal, so everything below rounds to +0.
inline constexpr float kExpUnderflowThreshold = -104.0f;

// exp(x) to within 1 ulp (normal results; tests/test_routing.cpp measures it against double exp).
// x = k*ln2 + r with k = rint(x / ln2), |r| <= ln2/2 (+ a rounding sliver). r is formed with two
// FMAs against a Cody-Waite split of ln2: ln2_hi has the float's 24 bits, and for the k in range
// (|k| <= 150) x - k*ln2_hi is exact, so one rounding remains in the ln2_lo step.
// exp(r) is Taylor to degree 7 (truncation < 0.05 ulp on |r| <= 0.35), evaluated by Horner in FMAs.
// 2^k is applied as two exact power-of-two products (k split in halves) so that k = 128 does not
// overflow the 2^k constant and a subnormal result is rounded only once.
FP4MOE_HD float exp_det(float x) {
  constexpr float kLog2e = 0x1.715476p+0f;
  constexpr float kLn2Hi = 0x1.62e430p-1f;
  constexpr float kLn2Lo = -0x1.05c610p-29f;
  // 1.5 * 2^23: adding it rounds a |value| < 2^22 to an integer (round-to-nearest-even).
  constexpr float kRoundMagic = 0x1.8p+23f;
  constexpr float kC2 = 0x1.000000p-1f;  // 1/2!
  constexpr float kC3 = 0x1.555556p-3f;  // 1/3!
  constexpr float kC4 = 0x1.555556p-5f;  // 1/4!
  constexpr float kC5 = 0x1.111112p-7f;  // 1/5!
  constexpr float kC6 = 0x1.6c16c2p-10f;  // 1/6!
  constexpr float kC7 = 0x1.a01a02p-13f;  // 1/7!

  if (x != x) return add_rn(x, x);  // NaN in, quiet NaN out
  if (x > kExpOverflowThreshold) return bits_float(0x7f800000u);
  if (x < kExpUnderflowThreshold) return 0.0f;

  const float k_float = add_rn(add_rn(mul_rn(x, kLog2e), kRoundMagic), -kRoundMagic);
  const int k = static_cast<int>(k_float);  // in [-150, 128]
  float r = fmaf(-k_float, kLn2Hi, x);
  r = fmaf(-k_float, kLn2Lo, r);

  float p = kC7;
  p = fmaf(p, r, kC6);
  p = fmaf(p, r, kC5);
  p = fmaf(p, r, kC4);
  p = fmaf(p, r, kC3);
  p = fmaf(p, r, kC2);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);  // exp(r), in [0.70, 1.42]

  // k1, k2 in [-75, 64]: both factors are normal floats and p * 2^k1 is exact.
  const int k1 = k / 2;
  const int k2 = k - k1;
  const float scale1 = bits_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float scale2 = bits_float(static_cast<uint32_t>(k2 + 127) << 23);
  return mul_rn(mul_rn(p, scale1), scale2);
}

// 1 / (1 + exp(-x)). For x < 0 it is evaluated as e / (1 + e) with e = exp(x), which keeps the
// relative accuracy where 1 + exp(-x) would overflow (x < -88.7) and returns subnormals there.
// sigmoid(+-0) = 0.5 exactly, sigmoid(-inf) = 0, sigmoid(+inf) = 1, NaN stays NaN.
FP4MOE_HD float sigmoid_det(float x) {
  if (x < 0.0f) {
    const float e = exp_det(x);
    return div_rn(e, add_rn(1.0f, e));
  }
  return div_rn(1.0f, add_rn(1.0f, exp_det(-x)));
}

// ---- Selection order ---------------------------------------------------------------------------
// Selection compares scores through an unsigned key that orders like the float values, with two
// choices that make it a total order (so any selection algorithm picks the same set):
//   - -0 and +0 get the same key (they compare equal as floats; the tie then goes to the lower id),
//   - every NaN gets key 0, below -inf: a NaN score is chosen only when nothing else is left.

FP4MOE_HD uint32_t order_key(float x) {
  if (x != x) return 0u;
  uint32_t u = float_bits(x);
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The float a key stands for (-0 comes back as +0, NaN as the default quiet NaN).
FP4MOE_HD float key_value(uint32_t key) {
  if (key == 0u) return bits_float(0x7fc00000u);
  return bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Key and id in one 64-bit value: a larger rank wins, equal keys go to the lower id, and every
// (key, id) rank is non-zero and unique, so 0 can mean "no candidate".
FP4MOE_HD uint64_t make_rank(uint32_t key, int id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
FP4MOE_HD int rank_id(uint64_t rank) { return static_cast<int>(~static_cast<uint32_t>(rank)); }
FP4MOE_HD uint32_t rank_key(uint64_t rank) { return static_cast<uint32_t>(rank >> 32); }

// ---- Summation order ---------------------------------------------------------------------------
// The softmax denominator sums all E experts in the order of one warp: lane l accumulates experts
// l, l+32, l+64, ... in that order starting from +0, then the 32 partials are combined by an XOR
// butterfly (offsets 16, 8, 4, 2, 1; lane i adds lane i^offset). Float addition is commutative, so
// every lane ends with the same value; the host function reproduces that value bit for bit.
inline constexpr int kSumLanes = 32;

inline float sum_in_warp_order(const float* values, int n) {
  float partial[kSumLanes];
  for (int lane = 0; lane < kSumLanes; ++lane) partial[lane] = 0.0f;
  for (int i = 0; i < n; ++i) partial[i % kSumLanes] = add_rn(partial[i % kSumLanes], values[i]);
  for (int offset = kSumLanes / 2; offset >= 1; offset /= 2) {
    float next[kSumLanes];
    for (int lane = 0; lane < kSumLanes; ++lane) next[lane] = add_rn(partial[lane], partial[lane ^ offset]);
    for (int lane = 0; lane < kSumLanes; ++lane) partial[lane] = next[lane];
  }
  return partial[0];
}

}  // namespace fp4moe::routing
