// NVFP4-quantized dispatch of the parallel MoE (w4a4): one 16-element block of a token row, quantized
// by the sender and expanded by the receiver. Shared by the CPU reference backend and the GPU backend's
// kernels (one source of truth, so both move identical bytes), and written to reproduce exactly what
// the expert layer's own w4a4 input path computes for a token (permute.cu, reference/moe_reference.cpp):
// the optional router weight on the input rounded to bf16, then detail::fake_quantize_nvfp4_block_kernel,
// i.e. the `kernel` recipe's codes and e4m3 block scale, used as code x block scale (exact in bf16).
//
// Row layout on the wire (H elements): H/2 bytes of e2m1 codes (element 2j in the low nibble of byte
// j), then H/16 e4m3 block-scale bytes.
#pragma once

#include <cstdint>

#include "fp4moe/numerics.h"
#include "src/format/block_codec.h"

namespace fp4moe::detail {

// x: 16 bf16 elements; weight applied when `weighted`; gs: encode-convention global scale. Writes 8
// code bytes, returns the scale byte.
FP4MOE_HD uint8_t quantize_dispatch_block(const uint16_t* x, bool weighted, float weight, float gs, uint8_t* codes) {
  float u[kNvfp4BlockSize];
  FP4MOE_UNROLL
  for (int i = 0; i < kNvfp4BlockSize; ++i) {
    u[i] = bf16_to_float(x[i]);
    if (weighted) u[i] = bf16_to_float(float_to_bf16(mul_rn(u[i], weight)));
  }
  return quantize_nvfp4_block_kernel(u, gs, codes);
}

// The bf16 values fake_quantize_nvfp4_block_kernel leaves for the block: code x e4m3 scale.
FP4MOE_HD void dequantize_dispatch_block(const uint8_t* codes, uint8_t scale_byte, uint16_t* out) {
  const float scale = e4m3_to_float(scale_byte);
  FP4MOE_UNROLL
  for (int i = 0; i < kNvfp4BlockSize; ++i) {
    const uint8_t code = (i & 1) ? (codes[i / 2] >> 4) : (codes[i / 2] & 0xf);
    out[i] = float_to_bf16(mul_rn(e2m1_to_float(code), scale));
  }
}

// Bytes of one quantized row of `hidden` elements (a multiple of 16).
constexpr int64_t dispatch_row_bytes(int64_t hidden) { return hidden / 2 + hidden / kNvfp4BlockSize; }

}  // namespace fp4moe::detail
