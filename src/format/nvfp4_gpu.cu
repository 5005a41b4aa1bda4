// Device codec for NVFP4 / MXFP4: quantize, dequantize and scale-layout conversion, any CUDA arch.
// One thread per scale block; the block math is src/format/block_codec.h, the same code the CPU
// codec runs, so the bytes match the host codec (quantize_nvfp4_cpu & co) exactly. Not on the
// MoE hot path: the forward fuses activation quantization into its permute kernel.
#include <cuda_bf16.h>

#include "fp4moe/format.h"
#include "src/common/cuda_utils.h"
#include "src/format/block_codec.h"

namespace fp4moe {
namespace {

constexpr int kThreads = 256;

template <int N>
__device__ void load_block(const void* x, InputType type, int64_t offset, float* out) {
  if (type == InputType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + offset);
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 v = p[i];
      out[4 * i] = v.x, out[4 * i + 1] = v.y, out[4 * i + 2] = v.z, out[4 * i + 3] = v.w;
    }
  } else {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + offset);
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const uint4 v = p[i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[8 * i + 2 * j] = bf16_to_float(uint16_t(w[j] & 0xffff));
        out[8 * i + 2 * j + 1] = bf16_to_float(uint16_t(w[j] >> 16));
      }
    }
  }
}

__global__ void quantize_nvfp4_kernel(int64_t rows, int64_t cols, const void* x, InputType type, Nvfp4Recipe recipe,
                                      float scale, ScaleLayout layout, uint8_t* packed, uint8_t* scales) {
  const int64_t num_sf = cols / kNvfp4BlockSize;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * num_sf) return;
  const int64_t r = idx / num_sf, b = idx % num_sf;
  float v[kNvfp4BlockSize];
  load_block<kNvfp4BlockSize>(x, type, r * cols + b * kNvfp4BlockSize, v);
  alignas(8) uint8_t out[8];
  const uint8_t sf = recipe == Nvfp4Recipe::kKernel ? detail::quantize_nvfp4_block_kernel(v, scale, out)
                                                    : detail::quantize_nvfp4_block_modelopt(v, scale, out);
  *reinterpret_cast<uint2*>(packed + idx * 8) = *reinterpret_cast<const uint2*>(out);
  scales[layout == ScaleLayout::kLinear ? idx : detail::swizzled_offset(r, b, num_sf)] = sf;
}

__global__ void dequantize_nvfp4_kernel(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                                        ScaleLayout layout, GlobalScale g, float* out) {
  const int64_t num_sf = cols / kNvfp4BlockSize;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * num_sf) return;
  const int64_t r = idx / num_sf, b = idx % num_sf;
  const uint8_t sf = scales[layout == ScaleLayout::kLinear ? idx : detail::swizzled_offset(r, b, num_sf)];
  const uint2 q = *reinterpret_cast<const uint2*>(packed + idx * 8);
  const uint32_t w[2] = {q.x, q.y};
  float4* o = reinterpret_cast<float4*>(out + idx * kNvfp4BlockSize);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = w[i / 2] >> (16 * (i % 2));
    o[i] = make_float4(detail::dequant_nvfp4(word & 0xf, sf, g), detail::dequant_nvfp4((word >> 4) & 0xf, sf, g),
                       detail::dequant_nvfp4((word >> 8) & 0xf, sf, g), detail::dequant_nvfp4((word >> 12) & 0xf, sf, g));
  }
}

__global__ void quantize_mxfp4_kernel(int64_t rows, int64_t cols, const void* x, InputType type, uint8_t* packed,
                                      uint8_t* scales) {
  const int64_t num_sf = cols / kMxfp4BlockSize;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * num_sf) return;
  float v[kMxfp4BlockSize];
  load_block<kMxfp4BlockSize>(x, type, idx * kMxfp4BlockSize, v);
  alignas(16) uint8_t out[16];
  scales[idx] = detail::quantize_mxfp4_block(v, out);
  *reinterpret_cast<uint4*>(packed + idx * 16) = *reinterpret_cast<const uint4*>(out);
}

__global__ void dequantize_mxfp4_kernel(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                                        float* out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * cols / 2) return;
  const uint8_t byte = packed[idx];
  const uint8_t s = scales[(idx * 2) / kMxfp4BlockSize];
  out[2 * idx] = detail::dequant_mxfp4(byte & 0xf, s);
  out[2 * idx + 1] = detail::dequant_mxfp4(byte >> 4, s);
}

__global__ void swizzle_kernel(int64_t rows, int64_t num_sf, const uint8_t* in, uint8_t* out, bool to_swizzled) {
  const int64_t padded_rows = (rows + 127) / 128 * 128, padded_cols = (num_sf + 3) / 4 * 4;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= padded_rows * padded_cols) return;
  const int64_t r = idx / padded_cols, c = idx % padded_cols;
  const bool inside = r < rows && c < num_sf;
  const int64_t swz = detail::swizzled_offset(r, c, num_sf);
  if (to_swizzled) out[swz] = inside ? in[r * num_sf + c] : 0;
  else if (inside) out[r * num_sf + c] = in[swz];
}

unsigned grid_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

Status check_common(const char* what, int64_t rows, int64_t cols, int block, const void* a, const void* b,
                    const void* c) {
  if (rows < 0) return invalid_argument(what, ": rows = ", rows, " must be >= 0");
  if (cols <= 0 || cols % block != 0)
    return invalid_argument(what, ": cols = ", cols, " must be a positive multiple of ", block);
  if (rows > 0 && (!a || !b || !c)) return invalid_argument(what, ": null pointer argument");
  return Status::Ok();
}

Status check_aligned(const char* what, const char* arg, const void* p, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
    return invalid_argument(what, ": ", arg, " = ", p, " must be ", alignment, "-byte aligned");
  return Status::Ok();
}

}  // namespace

Status quantize_nvfp4_gpu(const Nvfp4QuantizeParams& p, const void* x, InputType x_type, uint8_t* packed,
                          uint8_t* scales, cudaStream_t stream) {
  FP4MOE_RETURN_IF_ERROR(check_common("quantize_nvfp4_gpu", p.rows, p.cols, kNvfp4BlockSize, x, packed, scales));
  if (!(p.global_scale.value > 0.0f) || !std::isfinite(p.global_scale.value))
    return invalid_argument("global_scale = ", p.global_scale.value, " must be finite and > 0");
  FP4MOE_RETURN_IF_ERROR(check_aligned("quantize_nvfp4_gpu", "x", x, 16));
  FP4MOE_RETURN_IF_ERROR(check_aligned("quantize_nvfp4_gpu", "packed", packed, 8));
  if (p.rows == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(
      check_reachable("quantize_nvfp4_gpu", stream, {{"x", x}, {"packed", packed}, {"scales", scales}}));
  const bool want_encode = p.recipe == Nvfp4Recipe::kKernel;
  const bool have_encode = p.global_scale.convention == GlobalScaleConvention::kEncode;
  const float scale = want_encode == have_encode ? p.global_scale.value : 1.0f / p.global_scale.value;
  if (p.layout == ScaleLayout::kSwizzled128x4)
    FP4MOE_CUDA_RETURN(cudaMemsetAsync(scales, 0, scale_bytes(p.layout, p.rows, p.cols / kNvfp4BlockSize), stream));
  const int64_t n = p.rows * (p.cols / kNvfp4BlockSize);
  quantize_nvfp4_kernel<<<grid_for(n), kThreads, 0, stream>>>(p.rows, p.cols, x, x_type, p.recipe, scale, p.layout,
                                                               packed, scales);
  FP4MOE_CUDA_LAUNCH_CHECK(quantize_nvfp4_kernel);
  return Status::Ok();
}

Status dequantize_nvfp4_gpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            ScaleLayout layout, GlobalScale g, float* out, cudaStream_t stream) {
  FP4MOE_RETURN_IF_ERROR(check_common("dequantize_nvfp4_gpu", rows, cols, kNvfp4BlockSize, packed, scales, out));
  if (!(g.value > 0.0f) || !std::isfinite(g.value))
    return invalid_argument("global_scale = ", g.value, " must be finite and > 0");
  FP4MOE_RETURN_IF_ERROR(check_aligned("dequantize_nvfp4_gpu", "packed", packed, 8));
  FP4MOE_RETURN_IF_ERROR(check_aligned("dequantize_nvfp4_gpu", "out", out, 16));
  if (rows == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(
      check_reachable("dequantize_nvfp4_gpu", stream, {{"packed", packed}, {"scales", scales}, {"out", out}}));
  const int64_t n = rows * (cols / kNvfp4BlockSize);
  dequantize_nvfp4_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, cols, packed, scales, layout, g, out);
  FP4MOE_CUDA_LAUNCH_CHECK(dequantize_nvfp4_kernel);
  return Status::Ok();
}

Status quantize_mxfp4_gpu(int64_t rows, int64_t cols, const void* x, InputType x_type, uint8_t* packed,
                          uint8_t* scales, cudaStream_t stream) {
  FP4MOE_RETURN_IF_ERROR(check_common("quantize_mxfp4_gpu", rows, cols, kMxfp4BlockSize, x, packed, scales));
  FP4MOE_RETURN_IF_ERROR(check_aligned("quantize_mxfp4_gpu", "x", x, 16));
  FP4MOE_RETURN_IF_ERROR(check_aligned("quantize_mxfp4_gpu", "packed", packed, 16));
  if (rows == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(
      check_reachable("quantize_mxfp4_gpu", stream, {{"x", x}, {"packed", packed}, {"scales", scales}}));
  const int64_t n = rows * (cols / kMxfp4BlockSize);
  quantize_mxfp4_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, cols, x, x_type, packed, scales);
  FP4MOE_CUDA_LAUNCH_CHECK(quantize_mxfp4_kernel);
  return Status::Ok();
}

Status dequantize_mxfp4_gpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales, float* out,
                            cudaStream_t stream) {
  FP4MOE_RETURN_IF_ERROR(check_common("dequantize_mxfp4_gpu", rows, cols, kMxfp4BlockSize, packed, scales, out));
  if (rows == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(check_aligned("dequantize_mxfp4_gpu", "out", out, 4));  // (float stores)
  FP4MOE_RETURN_IF_ERROR(
      check_reachable("dequantize_mxfp4_gpu", stream, {{"packed", packed}, {"scales", scales}, {"out", out}}));
  dequantize_mxfp4_kernel<<<grid_for(rows * cols / 2), kThreads, 0, stream>>>(rows, cols, packed, scales, out);
  FP4MOE_CUDA_LAUNCH_CHECK(dequantize_mxfp4_kernel);
  return Status::Ok();
}

Status swizzle_scales_gpu(int64_t rows, int64_t num_sf, const uint8_t* linear, uint8_t* swizzled,
                          cudaStream_t stream) {
  if (rows < 0 || num_sf <= 0) return invalid_argument("rows = ", rows, ", num_scale_cols = ", num_sf, " invalid");
  if (!linear || !swizzled) return invalid_argument("swizzle_scales_gpu: null pointer argument");
  const int64_t n = int64_t(scale_bytes(ScaleLayout::kSwizzled128x4, rows, num_sf));
  if (n == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(check_reachable("swizzle_scales_gpu", stream, {{"linear", linear}, {"swizzled", swizzled}}));
  swizzle_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, num_sf, linear, swizzled, true);
  FP4MOE_CUDA_LAUNCH_CHECK(swizzle_kernel);
  return Status::Ok();
}

Status unswizzle_scales_gpu(int64_t rows, int64_t num_sf, const uint8_t* swizzled, uint8_t* linear,
                            cudaStream_t stream) {
  if (rows < 0 || num_sf <= 0) return invalid_argument("rows = ", rows, ", num_scale_cols = ", num_sf, " invalid");
  if (!linear || !swizzled) return invalid_argument("unswizzle_scales_gpu: null pointer argument");
  const int64_t n = int64_t(scale_bytes(ScaleLayout::kSwizzled128x4, rows, num_sf));
  if (n == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(check_reachable("unswizzle_scales_gpu", stream, {{"swizzled", swizzled}, {"linear", linear}}));
  swizzle_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, num_sf, swizzled, linear, false);
  FP4MOE_CUDA_LAUNCH_CHECK(swizzle_kernel);
  return Status::Ok();
}

}  // namespace fp4moe
