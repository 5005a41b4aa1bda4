// NVFP4 scale layouts: linear [rows, K/16] and the 128x4 swizzle of Blackwell's block-scaled MMA
// (rows padded to 128, scale columns to 4; a 512-byte atom holds 128 rows x 4 columns with row r at
// (r%32)*16 + (r/32)*4 inside the atom, so the 32 lanes of a warp read 16 contiguous bytes each).
#include <cstring>

#include "fp4moe/format.h"
#include "src/format/block_codec.h"

namespace fp4moe {

size_t scale_bytes(ScaleLayout layout, int64_t rows, int64_t num_scale_cols) {
  if (layout == ScaleLayout::kLinear) return size_t(rows * num_scale_cols);
  const int64_t padded_rows = (rows + 127) / 128 * 128;
  const int64_t padded_cols = (num_scale_cols + 3) / 4 * 4;
  return size_t(padded_rows * padded_cols);
}

int64_t swizzled_scale_offset(int64_t row, int64_t col, int64_t num_scale_cols) {
  return detail::swizzled_offset(row, col, num_scale_cols);
}

namespace {
Status check_layout_args(int64_t rows, int64_t num_scale_cols, const void* a, const void* b) {
  if (rows < 0) return invalid_argument("rows = ", rows, " must be >= 0");
  if (num_scale_cols <= 0) return invalid_argument("num_scale_cols = ", num_scale_cols, " must be > 0");
  if (!a || !b) return invalid_argument("scale layout conversion: null pointer argument");
  return Status::Ok();
}
}  // namespace

Status swizzle_scales_cpu(int64_t rows, int64_t num_scale_cols, const uint8_t* linear, uint8_t* swizzled) {
  FP4MOE_RETURN_IF_ERROR(check_layout_args(rows, num_scale_cols, linear, swizzled));
  std::memset(swizzled, 0, scale_bytes(ScaleLayout::kSwizzled128x4, rows, num_scale_cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < num_scale_cols; ++c)
      swizzled[detail::swizzled_offset(r, c, num_scale_cols)] = linear[r * num_scale_cols + c];
  return Status::Ok();
}

Status unswizzle_scales_cpu(int64_t rows, int64_t num_scale_cols, const uint8_t* swizzled, uint8_t* linear) {
  FP4MOE_RETURN_IF_ERROR(check_layout_args(rows, num_scale_cols, swizzled, linear));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < num_scale_cols; ++c)
      linear[r * num_scale_cols + c] = swizzled[detail::swizzled_offset(r, c, num_scale_cols)];
  return Status::Ok();
}

}  // namespace fp4moe
