// Grouped MoE GEMMs on plain CUDA cores (any arch): the simple path that the wgmma kernels are
// checked against, and the fallback off Hopper. One CTA per (token tile of 16 rows, 64-row weight
// unit); weights are read through the layout accessors of weight_layout.h and dequantized exactly
// (code * scale * 2^-7, the same values the wgmma path feeds its tensor cores), fp32 accumulation.
// Must match reference/moe_reference.cpp within the tolerances of tests/test_moe_gpu.cpp.
#include <cuda_bf16.h>

#include "src/common/cuda_utils.h"
#include "src/format/block_codec.h"
#include "src/gemm/simt/grouped_gemm_simt.h"

namespace fp4moe {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = layout::kUnitRows;  // 64
constexpr int kTok = kSimtTileTokens;     // 16
constexpr int kChunk = 64;

// Weight value (unit row, k) of expert e, unit mu, without the global scale, times 2^-7.
__device__ float weight_value(const uint8_t* base, const layout::GemmWeightShape& s, bool mxfp4, int e,
                              int64_t mu, int ur, int64_t k) {
  const uint8_t code = layout::load_code(base, s, e, mu, ur, k);
  const float scale = layout::scale_of_code(layout::load_scale_code(base, s, e, mu, ur, k), mxfp4);
  return e2m1_to_float(code) * scale * (1.0f / 128.0f);
}

__device__ float load_tiled(const uint16_t* buf, int64_t row, int64_t k, int64_t rows_cap) {
  return bf16_to_float(*reinterpret_cast<const uint16_t*>(reinterpret_cast<const char*>(buf) +
                                                          tiled_offset_bytes(row, k, rows_cap)));
}

// acc[r][t] = sum_k W[unit row r][k] * X[row0 + t][k] for the CTA's tile; returns in smem `out`.
__device__ void tile_gemm(const uint8_t* w, const layout::GemmWeightShape& s, bool mxfp4, int e, int64_t mu,
                          const uint16_t* x, int64_t rows_cap, int32_t row0, int32_t rows, int64_t k_padded,
                          float (*ws)[kChunk + 1], float (*xs)[kChunk + 1], float (*out)[kTok]) {
  const int tid = threadIdx.x;
  const int r = tid % kRows, t0 = (tid / kRows) * 4;
  float acc[4] = {0, 0, 0, 0};
  for (int64_t k0 = 0; k0 < k_padded; k0 += kChunk) {
    for (int i = tid; i < kRows * kChunk; i += kThreads)
      ws[i / kChunk][i % kChunk] = weight_value(w, s, mxfp4, e, mu, i / kChunk, k0 + i % kChunk);
    for (int i = tid; i < kTok * kChunk; i += kThreads) {
      const int t = i / kChunk;
      xs[t][i % kChunk] = t < rows ? load_tiled(x, row0 + t, k0 + i % kChunk, rows_cap) : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kChunk; ++k) {
      const float wv = ws[r][k];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] = fmaf(wv, xs[t0 + j][k], acc[j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) out[r][t0 + j] = acc[j];
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) gemm1_simt_kernel(MoeGemmParams p) {
  const TileCoord tile = find_tile(p, p.ws.tile_start, blockIdx.x);
  if (tile.expert < 0) return;
  const int64_t mu = blockIdx.y;
  __shared__ float ws[kRows][kChunk + 1];
  __shared__ float xs[kTok][kChunk + 1];
  __shared__ float acc[kRows][kTok];
  __shared__ float hs[kTok][layout::kIntermediatePerUnit];
  tile_gemm(p.w13, p.g1, p.mxfp4, tile.expert, mu, p.ws.x, p.layout.rows_cap, tile.row0, tile.rows,
            p.layout.x_k, ws, xs, acc);
  const int e = tile.expert;
  const float alpha = p.alpha1[e];
  // Activation: unit row 16g + s (s < 8) is the gate, 16g + 8 + s the up row of i = 32mu + 8g + s.
  for (int idx = threadIdx.x; idx < kTok * layout::kIntermediatePerUnit; idx += kThreads) {
    const int t = idx / layout::kIntermediatePerUnit, ui = idx % layout::kIntermediatePerUnit;
    const int g = ui / 8, s = ui % 8;
    const int64_t i = mu * layout::kIntermediatePerUnit + ui;
    float gate = acc[16 * g + s][t] * alpha, up = acc[16 * g + 8 + s][t] * alpha;
    if (p.w13_bias) {
      gate += p.w13_bias[int64_t(e) * 2 * p.inter_local + i];
      up += p.w13_bias[int64_t(e) * 2 * p.inter_local + p.inter_local + i];
    }
    hs[t][ui] = activation_f32(p.activation, gate, up);
  }
  __syncthreads();
  // Store (bf16, or NVFP4 fake-quantized in blocks of 16 along i for w4a4).
  for (int idx = threadIdx.x; idx < kTok * 2; idx += kThreads) {
    const int t = idx / 2, blk = idx % 2;
    if (t >= tile.rows) continue;
    float v[16];
    for (int i = 0; i < 16; ++i) v[i] = hs[t][16 * blk + i];
    if (p.w4a4) detail::fake_quantize_nvfp4_block_kernel(v, p.a2_gs[e]);
    for (int i = 0; i < 16; ++i) {
      const int64_t k = mu * layout::kIntermediatePerUnit + 16 * blk + i;
      *reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(p.ws.h) +
                                   tiled_offset_bytes(tile.row0 + t, k, p.layout.rows_cap)) = float_to_bf16(v[i]);
    }
  }
}

__global__ void __launch_bounds__(kThreads) gemm2_simt_kernel(MoeGemmParams p) {
  const TileCoord tile = find_tile(p, p.ws.tile_start, blockIdx.x);
  if (tile.expert < 0) return;
  const int64_t mu = blockIdx.y;
  __shared__ float ws[kRows][kChunk + 1];
  __shared__ float xs[kTok][kChunk + 1];
  __shared__ float acc[kRows][kTok];
  tile_gemm(p.w2, p.g2, p.mxfp4, tile.expert, mu, p.ws.h, p.layout.rows_cap, tile.row0, tile.rows,
            p.layout.h_k, ws, xs, acc);
  const int e = tile.expert;
  const float alpha = p.alpha2[e];
  for (int idx = threadIdx.x; idx < kTok * kRows; idx += kThreads) {
    const int t = idx / kRows, r = idx % kRows;
    const int64_t col = mu * kRows + r;
    if (t >= tile.rows || col >= p.hidden) continue;
    const int32_t row = tile.row0 + t;
    float v = acc[r][t] * alpha;
    if (p.w2_bias) v += p.w2_bias[int64_t(e) * p.hidden + col];
    if (!p.weight_on_input) v *= p.ws.topk_weights[p.ws.row_pair[row]];
    p.ws.y[int64_t(row) * p.hidden + col] = float_to_bf16(v);
  }
}

}  // namespace

Status launch_gemm1_simt(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.max_tiles == 0) return Status::Ok();
  const dim3 grid(unsigned(p.max_tiles), unsigned(p.g1.m_units()));
  gemm1_simt_kernel<<<grid, kThreads, 0, stream>>>(p);
  FP4MOE_CUDA_LAUNCH_CHECK(gemm1_simt_kernel);
  return Status::Ok();
}

Status launch_gemm2_simt(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.max_tiles == 0) return Status::Ok();
  const dim3 grid(unsigned(p.max_tiles), unsigned(p.g2.m_units()));
  gemm2_simt_kernel<<<grid, kThreads, 0, stream>>>(p);
  FP4MOE_CUDA_LAUNCH_CHECK(gemm2_simt_kernel);
  return Status::Ok();
}

}  // namespace fp4moe
