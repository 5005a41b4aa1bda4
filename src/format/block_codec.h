// Block quantizers shared by the CPU codec and the CUDA kernels (one source of truth, so both produce
// identical bytes). Contracts are documented in include/fp4moe/format.h.
#pragma once

#include <cstdint>

#include "fp4moe/format.h"
#include "fp4moe/numerics.h"

namespace fp4moe::detail {

struct BlockAmax {
  float amax;
  bool has_nan;
};

template <int N>
FP4MOE_HD BlockAmax block_amax(const float* x) {
  float amax = 0.0f;
  bool has_nan = false;
FP4MOE_UNROLL
  for (int i = 0; i < N; ++i) {
    const float a = fabsf(x[i]);
    has_nan |= (a != a);
    amax = a > amax ? a : amax;
  }
  return {amax, has_nan};
}

FP4MOE_HD void pack_e2m1(const float* scaled, int n, uint8_t* packed) {
  for (int i = 0; i < n; i += 2) {
    packed[i / 2] = uint8_t(float_to_e2m1(scaled[i]) | (float_to_e2m1(scaled[i + 1]) << 4));
  }
}

// NVFP4 `kernel` recipe on one block of 16. gs is the encode-convention global scale.
// Returns the scale byte and writes 8 packed bytes.
FP4MOE_HD uint8_t quantize_nvfp4_block_kernel(const float* x, float gs, uint8_t* packed) {
  const BlockAmax b = block_amax<kNvfp4BlockSize>(x);
  float scaled[kNvfp4BlockSize];
  if (b.has_nan) {
FP4MOE_UNROLL
    for (int i = 0; i < kNvfp4BlockSize / 2; ++i) packed[i] = 0;
    return 0x7f;
  }
  const float sf = mul_rn(gs, mul_rn(b.amax, rcp_approx_ftz(6.0f)));
  const uint8_t sf8 = float_to_e4m3(sf);
  const float sf_rounded = e4m3_to_float(sf8);
  // NOTE: the test is on the rounded scale (as in vLLM's nvfp4_utils.cuh), so a block whose scale
  // underflows e4m3 encodes as zeros instead of multiplying by rcp(0) = inf.
  const float enc = sf_rounded != 0.0f ? rcp_approx_ftz(mul_rn(sf_rounded, rcp_approx_ftz(gs))) : 0.0f;
FP4MOE_UNROLL
  for (int i = 0; i < kNvfp4BlockSize; ++i) scaled[i] = mul_rn(x[i], enc);
  pack_e2m1(scaled, kNvfp4BlockSize, packed);
  return sf8;
}

// The `kernel` recipe applied and undone on one block of 16 (w4a4 activations): v[i] becomes
// e2m1 * e4m3 scale, exact in bf16; the caller divides by gs (in the GEMM epilogue's alpha).
FP4MOE_HD void fake_quantize_nvfp4_block_kernel(float* v, float gs) {
  uint8_t packed[kNvfp4BlockSize / 2];
  const float scale = e4m3_to_float(quantize_nvfp4_block_kernel(v, gs, packed));
  FP4MOE_UNROLL
  for (int i = 0; i < kNvfp4BlockSize; ++i) {
    const uint8_t code = (i & 1) ? (packed[i / 2] >> 4) : (packed[i / 2] & 0xf);
    v[i] = mul_rn(e2m1_to_float(code), scale);
  }
}

// NVFP4 `modelopt` recipe on one block of 16. s2 is the decode-convention global scale.
FP4MOE_HD uint8_t quantize_nvfp4_block_modelopt(const float* x, float s2, uint8_t* packed) {
  const BlockAmax b = block_amax<kNvfp4BlockSize>(x);
  float scaled[kNvfp4BlockSize];
  if (b.has_nan) {
FP4MOE_UNROLL
    for (int i = 0; i < kNvfp4BlockSize / 2; ++i) packed[i] = 0;
    return 0x7f;
  }
  uint8_t sf8 = float_to_e4m3(div_rn(b.amax, mul_rn(6.0f, s2)));
  // ModelOpt replaces a zero block scale by 1.0 so the division below stays finite.
  if ((sf8 & 0x7f) == 0) sf8 = 0x38;
  const float denom = mul_rn(e4m3_to_float(sf8), s2);
FP4MOE_UNROLL
  for (int i = 0; i < kNvfp4BlockSize; ++i) scaled[i] = div_rn(x[i], denom);
  pack_e2m1(scaled, kNvfp4BlockSize, packed);
  return sf8;
}

// MXFP4 (OCP rule) on one block of 32: scale exponent floor(log2(amax)) - 2, computed from the fp32
// exponent field, so x / 2^e <= 8 and values above 6 saturate. Zero block -> 127 (1.0); NaN -> 0xff.
FP4MOE_HD uint8_t quantize_mxfp4_block(const float* x, uint8_t* packed) {
  const BlockAmax b = block_amax<kMxfp4BlockSize>(x);
  float scaled[kMxfp4BlockSize];
  if (b.has_nan) {
FP4MOE_UNROLL
    for (int i = 0; i < kMxfp4BlockSize / 2; ++i) packed[i] = 0;
    return 0xff;
  }
  int biased = 127;
  if (b.amax != 0.0f) {
    const uint32_t bits = float_bits(b.amax);
    int e = int((bits >> 23) & 0xff);   // biased fp32 exponent; 0 for subnormals
    if (e == 0xff) e = 254 + 2;         // inf: largest scale
    biased = e - 2;                     // floor(log2(amax)) - emax(e2m1) (+127 bias kept)
    if (biased < 0) biased = 0;
    if (biased > 254) biased = 254;
  }
  const float scale = e8m0_to_float(uint8_t(biased));
FP4MOE_UNROLL
  for (int i = 0; i < kMxfp4BlockSize; ++i) scaled[i] = div_rn(x[i], scale);  // exact: power of two
  pack_e2m1(scaled, kMxfp4BlockSize, packed);
  return uint8_t(biased);
}

FP4MOE_HD float dequant_nvfp4(uint8_t code, uint8_t sf8, GlobalScale g) {
  const float v = mul_rn(e2m1_to_float(code), e4m3_to_float(sf8));  // exact
  return g.convention == GlobalScaleConvention::kDecode ? mul_rn(v, g.value) : div_rn(v, g.value);
}

FP4MOE_HD float dequant_mxfp4(uint8_t code, uint8_t s8) {
  return mul_rn(e2m1_to_float(code), e8m0_to_float(s8));
}

FP4MOE_HD int64_t swizzled_offset(int64_t row, int64_t col, int64_t num_scale_cols) {
  const int64_t padded_cols = (num_scale_cols + 3) / 4 * 4;
  return ((row / 128) * (padded_cols / 4) + col / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 +
         col % 4;
}

}  // namespace fp4moe::detail
