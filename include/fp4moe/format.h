// NVFP4 and MXFP4: block-scaled 4-bit formats, host and device codecs, scale layouts.
//
// NVFP4: e2m1 values, blocks of 16 along K with one e4m3 scale each, one fp32 global scale per
// tensor. Element 2i is the low nibble of byte i. Dequant: x = e2m1 * float(scale) * s2, where
// s2 is the decode-convention global scale (ModelOpt weight_scale_2 = amax/2688), or equivalently
// x = e2m1 * float(scale) / gs with the encode convention gs = 2688/amax (vLLM, FlashInfer,
// compressed-tensors *_global_scale).
//
// Two quantization recipes, each bit-exact:
//   kKernel   - the activation recipe of the vLLM / TensorRT-LLM CUDA kernels (encode convention):
//               SF = gs * (amax * rcp(6)); sf8 = e4m3(SF); enc = rcp(float(sf8) * rcp(gs)) (0 if
//               amax == 0); q = e2m1(x * enc), rcp = rcp.approx.ftz.f32. A zero block has scale 0x00.
//   kModelopt - ModelOpt's weight recipe (decode convention): sf8 = e4m3(amax / (6 * s2));
//               q = e2m1(x / (float(sf8) * s2)) with true division; a zero block has scale 0x38 (1.0).
// A recipe given the other convention's scale converts it with one correctly rounded division.
//
// Special values (both recipes, documented behaviour, tested):
//   - a block containing NaN: scale byte 0x7f (e4m3 NaN) and all codes 0, so the whole block
//     dequantizes to NaN rather than silently to numbers;
//   - +-inf: the block amax is inf, the scale saturates to 448 and the inf elements to +-6, i.e.
//     inf quantizes to the largest representable magnitude of its block;
//   - negative values that round to zero keep their sign (code 0x8).
//
// MXFP4 (OCP MX): e2m1 values, blocks of 32, e8m0 scales (2^(s-127)), no global scale. Quantize:
// s = clamp(floor(log2(amax)) - 2 + 127, 0, 254) (the OCP rule: the largest power of two not above
// amax, divided by 2^emax(e2m1) = 4; values above 6 saturate), q = e2m1(x / 2^(s-127)). An all-zero
// block gets s = 127 (1.0); a block containing NaN gets s = 0xff (e8m0 NaN) and zero codes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp4moe/status.h"

#if FP4MOE_HAS_CUDA || defined(__CUDACC__)
#include <cuda_runtime_api.h>
#endif

namespace fp4moe {

constexpr int kNvfp4BlockSize = 16;
constexpr int kMxfp4BlockSize = 32;
constexpr float kE2m1Max = 6.0f;
constexpr float kE4m3Max = 448.0f;

enum class Nvfp4Recipe { kKernel, kModelopt };
enum class GlobalScaleConvention {
  kEncode,  // gs = 448*6/amax; dequant divides by it
  kDecode,  // s2 = amax/2688;  dequant multiplies by it
};
enum class ScaleLayout {
  kLinear,         // [rows, K/16] row-major, as stored in checkpoints
  kSwizzled128x4,  // Blackwell CUTLASS layout: rows padded to 128, scale columns to 4
};
enum class InputType { kF32, kBF16 };

const char* to_string(Nvfp4Recipe recipe);
const char* to_string(ScaleLayout layout);
Status parse_recipe(const char* name, Nvfp4Recipe* out);

struct GlobalScale {
  float value = 1.0f;
  GlobalScaleConvention convention = GlobalScaleConvention::kDecode;
  static GlobalScale encode(float gs) { return {gs, GlobalScaleConvention::kEncode}; }
  static GlobalScale decode(float s2) { return {s2, GlobalScaleConvention::kDecode}; }
  // Global scale from a tensor's amax in the given convention: encode 2688/amax, decode amax/2688.
  static GlobalScale from_amax(float amax, GlobalScaleConvention convention);
};

// Bytes of the scale tensor for `rows` rows and `num_scale_cols` scale columns in a layout.
size_t scale_bytes(ScaleLayout layout, int64_t rows, int64_t num_scale_cols);
// Byte offset of scale (row, col) in the 128x4 swizzled layout.
int64_t swizzled_scale_offset(int64_t row, int64_t col, int64_t num_scale_cols);

// ---- Host (CPU) codec ----------------------------------------------------------------------------
// x is [rows, cols] row-major (fp32 or bf16 bits as uint16_t), cols a multiple of the block size.
// packed is [rows, cols/2], scales is in `layout` (padding bytes written as 0).

struct Nvfp4QuantizeParams {
  int64_t rows = 0;
  int64_t cols = 0;
  Nvfp4Recipe recipe = Nvfp4Recipe::kKernel;
  GlobalScale global_scale;
  ScaleLayout layout = ScaleLayout::kLinear;
};

Status quantize_nvfp4_cpu(const Nvfp4QuantizeParams& params, const void* x, InputType x_type,
                          uint8_t* packed, uint8_t* scales);
Status dequantize_nvfp4_cpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            ScaleLayout layout, GlobalScale global_scale, float* out);

Status quantize_mxfp4_cpu(int64_t rows, int64_t cols, const void* x, InputType x_type,
                          uint8_t* packed, uint8_t* scales);
Status dequantize_mxfp4_cpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            float* out);

// Layout conversion of NVFP4 scale tensors ([rows, num_scale_cols] linear <-> 128x4 swizzled).
Status swizzle_scales_cpu(int64_t rows, int64_t num_scale_cols, const uint8_t* linear, uint8_t* swizzled);
Status unswizzle_scales_cpu(int64_t rows, int64_t num_scale_cols, const uint8_t* swizzled, uint8_t* linear);

#if FP4MOE_HAS_CUDA || defined(__CUDACC__)
// ---- Device codec: same contracts, device pointers, asynchronous on `stream`. -------------------
// A call with work to do (a non-empty input) first refuses, by name, a buffer the current device
// cannot dereference and a stream of another device (the stream only when it is not being captured).
Status quantize_nvfp4_gpu(const Nvfp4QuantizeParams& params, const void* x, InputType x_type,
                          uint8_t* packed, uint8_t* scales, cudaStream_t stream);
Status dequantize_nvfp4_gpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            ScaleLayout layout, GlobalScale global_scale, float* out, cudaStream_t stream);
Status quantize_mxfp4_gpu(int64_t rows, int64_t cols, const void* x, InputType x_type, uint8_t* packed,
                          uint8_t* scales, cudaStream_t stream);
Status dequantize_mxfp4_gpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            float* out, cudaStream_t stream);
Status swizzle_scales_gpu(int64_t rows, int64_t num_scale_cols, const uint8_t* linear, uint8_t* swizzled,
                          cudaStream_t stream);
Status unswizzle_scales_gpu(int64_t rows, int64_t num_scale_cols, const uint8_t* swizzled,
                            uint8_t* linear, cudaStream_t stream);
#endif

}  // namespace fp4moe
