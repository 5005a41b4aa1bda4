// Host codec for NVFP4 and MXFP4. The block math lives in block_codec.h, shared with the GPU codec.
#include <cstring>
#include <vector>

#include "fp4moe/format.h"
#include "src/format/block_codec.h"

namespace fp4moe {

const char* to_string(Nvfp4Recipe recipe) {
  return recipe == Nvfp4Recipe::kKernel ? "kernel" : "modelopt";
}

const char* to_string(ScaleLayout layout) {
  return layout == ScaleLayout::kLinear ? "linear" : "swizzled128x4";
}

Status parse_recipe(const char* name, Nvfp4Recipe* out) {
  const std::string s = name ? name : "";
  if (s == "kernel") *out = Nvfp4Recipe::kKernel;
  else if (s == "modelopt") *out = Nvfp4Recipe::kModelopt;
  else return invalid_argument("recipe = '", s, "' is not one of: kernel, modelopt");
  return Status::Ok();
}

GlobalScale GlobalScale::from_amax(float amax, GlobalScaleConvention convention) {
  const float s2 = amax > 0.0f ? amax / (kE2m1Max * kE4m3Max) : 1.0f;
  if (convention == GlobalScaleConvention::kDecode) return decode(s2);
  return encode(amax > 0.0f ? (kE2m1Max * kE4m3Max) / amax : 1.0f);
}

namespace {

Status check_shape(const char* what, int64_t rows, int64_t cols, int block) {
  if (rows < 0) return invalid_argument(what, ": rows = ", rows, " must be >= 0");
  if (cols <= 0 || cols % block != 0)
    return invalid_argument(what, ": cols = ", cols, " must be a positive multiple of ", block);
  return Status::Ok();
}

Status check_global_scale(GlobalScale g) {
  if (!(g.value > 0.0f) || !std::isfinite(g.value))
    return invalid_argument("global_scale = ", g.value, " must be finite and > 0");
  return Status::Ok();
}

void load_row_block(const void* x, InputType type, int64_t offset, int n, float* out) {
  if (type == InputType::kF32) {
    std::memcpy(out, static_cast<const float*>(x) + offset, sizeof(float) * n);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(x) + offset;
    for (int i = 0; i < n; ++i) out[i] = bf16_to_float(h[i]);
  }
}

// The scale a recipe wants, in its native convention (kernel: encode gs, modelopt: decode s2).
float native_scale(Nvfp4Recipe recipe, GlobalScale g) {
  const bool want_encode = recipe == Nvfp4Recipe::kKernel;
  const bool have_encode = g.convention == GlobalScaleConvention::kEncode;
  return want_encode == have_encode ? g.value : 1.0f / g.value;
}

}  // namespace

Status quantize_nvfp4_cpu(const Nvfp4QuantizeParams& p, const void* x, InputType x_type, uint8_t* packed,
                          uint8_t* scales) {
  FP4MOE_RETURN_IF_ERROR(check_shape("quantize_nvfp4", p.rows, p.cols, kNvfp4BlockSize));
  FP4MOE_RETURN_IF_ERROR(check_global_scale(p.global_scale));
  if (p.rows == 0) return Status::Ok();  // (null pointers allowed, as on the GPU)
  if (!x || !packed || !scales) return invalid_argument("quantize_nvfp4: null pointer argument");
  const int64_t num_sf = p.cols / kNvfp4BlockSize;
  if (p.layout == ScaleLayout::kSwizzled128x4) {
    std::memset(scales, 0, scale_bytes(p.layout, p.rows, num_sf));
  }
  const float scale = native_scale(p.recipe, p.global_scale);
  float block[kNvfp4BlockSize];
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t b = 0; b < num_sf; ++b) {
      load_row_block(x, x_type, r * p.cols + b * kNvfp4BlockSize, kNvfp4BlockSize, block);
      uint8_t* out = packed + r * (p.cols / 2) + b * (kNvfp4BlockSize / 2);
      const uint8_t sf = p.recipe == Nvfp4Recipe::kKernel
                             ? detail::quantize_nvfp4_block_kernel(block, scale, out)
                             : detail::quantize_nvfp4_block_modelopt(block, scale, out);
      const int64_t off = p.layout == ScaleLayout::kLinear ? r * num_sf + b
                                                            : detail::swizzled_offset(r, b, num_sf);
      scales[off] = sf;
    }
  }
  return Status::Ok();
}

Status dequantize_nvfp4_cpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            ScaleLayout layout, GlobalScale g, float* out) {
  FP4MOE_RETURN_IF_ERROR(check_shape("dequantize_nvfp4", rows, cols, kNvfp4BlockSize));
  FP4MOE_RETURN_IF_ERROR(check_global_scale(g));
  if (rows > 0 && (!packed || !scales || !out)) return invalid_argument("dequantize_nvfp4: null pointer argument");
  const int64_t num_sf = cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = packed[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xf);
      const int64_t b = c / kNvfp4BlockSize;
      const int64_t off = layout == ScaleLayout::kLinear ? r * num_sf + b : detail::swizzled_offset(r, b, num_sf);
      out[r * cols + c] = detail::dequant_nvfp4(code, scales[off], g);
    }
  }
  return Status::Ok();
}

Status quantize_mxfp4_cpu(int64_t rows, int64_t cols, const void* x, InputType x_type, uint8_t* packed,
                          uint8_t* scales) {
  FP4MOE_RETURN_IF_ERROR(check_shape("quantize_mxfp4", rows, cols, kMxfp4BlockSize));
  if (rows > 0 && (!x || !packed || !scales)) return invalid_argument("quantize_mxfp4: null pointer argument");
  const int64_t num_sf = cols / kMxfp4BlockSize;
  float block[kMxfp4BlockSize];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < num_sf; ++b) {
      load_row_block(x, x_type, r * cols + b * kMxfp4BlockSize, kMxfp4BlockSize, block);
      scales[r * num_sf + b] =
          detail::quantize_mxfp4_block(block, packed + r * (cols / 2) + b * (kMxfp4BlockSize / 2));
    }
  }
  return Status::Ok();
}

Status dequantize_mxfp4_cpu(int64_t rows, int64_t cols, const uint8_t* packed, const uint8_t* scales,
                            float* out) {
  FP4MOE_RETURN_IF_ERROR(check_shape("dequantize_mxfp4", rows, cols, kMxfp4BlockSize));
  if (rows > 0 && (!packed || !scales || !out)) return invalid_argument("dequantize_mxfp4: null pointer argument");
  const int64_t num_sf = cols / kMxfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = packed[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xf);
      out[r * cols + c] = detail::dequant_mxfp4(code, scales[r * num_sf + c / kMxfp4BlockSize]);
    }
  }
  return Status::Ok();
}

}  // namespace fp4moe
