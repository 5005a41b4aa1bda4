// Scalar numerics of the 4-bit formats, identical on host and device.
//
// Every function here is written with IEEE single-precision operations whose results are fully
// determined (no contraction into FMA, no approximate intrinsics), so the CPU reference and the CUDA
// kernels produce the same bits. The one approximate GPU instruction the `kernel` recipe uses,
// rcp.approx.ftz.f32, is emulated on the host (see rcp_approx_ftz below and src/format/rcp_approx.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP4MOE_HD __host__ __device__ __forceinline__
#define FP4MOE_UNROLL _Pragma("unroll")
#else
#define FP4MOE_HD inline
#define FP4MOE_UNROLL
#endif

namespace fp4moe {

// ---- Bit casts and bf16 --------------------------------------------------------------------------

FP4MOE_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

FP4MOE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// Products that must not be fused with a following add (nvcc contracts a*b+c by default).
FP4MOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP4MOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP4MOE_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP4MOE_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

// Round-to-nearest-even fp32 -> bf16; NaN stays NaN (quiet, sign kept).
FP4MOE_HD uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding_bias) >> 16);
}

// ---- e2m1 (FP4) ----------------------------------------------------------------------------------
// Code: bit 3 sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.

// Built from the bits (no table: a runtime-indexed array would live in local memory on the GPU).
FP4MOE_HD float e2m1_to_float(uint8_t code) {
  const uint32_t e = (code >> 1) & 3, m = code & 1;
  // e >= 1: 2^(e-1) * (1 + m/2); e == 0: m * 0.5.
  const uint32_t mag = e ? ((e + 126) << 23) | (m << 22) : (m ? 0x3f000000u : 0u);
  return bits_float(mag | (uint32_t(code & 8) << 28));
}

// Round-to-nearest-even onto the e2m1 grid with saturation (the semantics of
// cvt.rn.satfinite.e2m1x2.f32). A negative input that rounds to zero keeps its sign (code 0x8).
// NaN has no e2m1 encoding; it maps to +0 here, and the block quantizers flag NaN blocks through
// their scale byte instead (see nvfp4 docs in include/fp4moe/format.h).
FP4MOE_HD uint8_t float_to_e2m1(float x) {
  if (x != x) return 0;
  const uint8_t sign = (float_bits(x) >> 28) & 0x8;
  const float a = fabsf(x);
  uint8_t mag;
  if (a <= 0.25f) mag = 0;
  else if (a < 0.75f) mag = 1;
  else if (a <= 1.25f) mag = 2;
  else if (a < 1.75f) mag = 3;
  else if (a <= 2.5f) mag = 4;
  else if (a < 3.5f) mag = 5;
  else if (a <= 5.0f) mag = 6;
  else mag = 7;
  return uint8_t(sign | mag);
}

// ---- e4m3 ("fn": bias 7, max 448, no inf, NaN = 0x7f/0xff) ------------------------------------

FP4MOE_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80) << 24;
  const uint32_t exp = (b >> 3) & 0xf;
  const uint32_t man = b & 0x7;
  if (exp == 0xf && man == 0x7) return bits_float(sign | 0x7fc00000u);
  if (exp == 0) {  // subnormal: man * 2^-9
    return bits_float(sign | float_bits(float(man) * 0.001953125f));
  }
  return bits_float(sign | ((exp + 120) << 23) | (man << 20));
}

// Round-to-nearest-even fp32 -> e4m3 with saturation to +-448 (also for +-inf); NaN -> 0x7f with
// the input's sign. The semantics of cvt.rn.satfinite.e4m3x2.f32, computed with integer operations.
FP4MOE_HD uint8_t float_to_e4m3(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7f);
  if (a >= 0x43e00000u) return uint8_t(sign | 0x7e);  // >= 448 (and inf): saturate
  const int exp = int(a >> 23) - 127;
  if (exp < -6) {
    // Subnormal range: value = q * 2^-9, q = RNE(|x| * 2^9); q == 8 is the smallest normal (0x08).
    if (exp < -11) return sign;  // |x| < 2^-11: below a quarter step, rounds to (signed) zero
    const uint32_t man = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand, value = man * 2^(exp-23)
    const int shift = 23 - 9 - exp;                      // q = man >> shift, rounded
    const uint32_t q = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
    return uint8_t(sign | r);
  }
  // Normal: keep 3 mantissa bits, RNE on the 20 dropped bits; a carry bumps the exponent, which the
  // integer addition does for free.
  uint32_t code = (uint32_t(exp + 7) << 3) | ((a >> 20) & 0x7);
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (code & 1))) code += 1;
  if (code > 0x7e) code = 0x7e;
  return uint8_t(sign | code);
}

// ---- e8m0 (MXFP4 scale): 2^(b-127), 0xff = NaN ----------------------------------------------------

FP4MOE_HD float e8m0_to_float(uint8_t b) {
  if (b == 0xff) return bits_float(0x7fc00000u);
  if (b == 0) return bits_float(0x00400000u);  // 2^-127 is an fp32 subnormal
  return bits_float(uint32_t(b) << 23);
}

// ---- rcp.approx.ftz.f32 ----------------------------------------------------------------------------
// On the device, the PTX instruction itself. On the host, an emulation: the correctly rounded
// reciprocal, corrected by a table of the significands where the hardware differs (measured on an
// H200, sm_90; see src/format/rcp_approx.cpp and the GPU test RcpApprox.MatchesHardware).
float rcp_approx_ftz_host(float x);

FP4MOE_HD float rcp_approx_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return rcp_approx_ftz_host(x);
#endif
}

}  // namespace fp4moe
