// A question for a future GEMM1 without the permute (docs/perf-notes.md, session 26): can its producer
// gather a token tile straight from the hidden states, one TMA copy of a one-row box per row and K
// chunk? The kernels' token tiles are 64-column chunks of rows in the 128-byte swizzle that wgmma's
// K-major B operand reads (src/moe/workspace.h's tiled_offset_bytes: row r's 16-byte piece j at
// position j ^ (r % 8) of its 128 bytes). A plain bulk copy cannot permute the pieces; a tensor map
// with SWIZZLE_128B does, if the TMA unit takes the swizzle from the shared-memory address of each
// row, not from the row's place in its box. Here a tensor map over a [rows, H] bf16 matrix with a box
// of {64 columns, 1 row} copies a scattered list of rows, chunk by chunk, to row i of a 1024-byte
// aligned tile, and every byte must sit where tiled_offset_bytes puts it.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "src/gemm/sm90/ptx.cuh"
#include "src/moe/workspace.h"
#include "test_util.h"

namespace fp4moe::sm90 {
namespace {

constexpr int kTileRows = 16;   // two swizzle atoms of 8 rows
constexpr int kChunkBytes = kTileRows * 128;
constexpr int kMaxChunks = 8;

// Thread 0 copies (chunk c, source row ids[i]) to row i of chunk c's tile for every c and i, one
// tensor copy each; then the CTA writes the tiles out as they are in shared memory.
__global__ void gather_rows_kernel(const __grid_constant__ CUtensorMap map, const int32_t* ids, int chunks,
                                   uint8_t* out) {
  __shared__ alignas(1024) uint8_t tiles[kMaxChunks * kChunkBytes];
  __shared__ alignas(8) uint64_t bar;
  // The tiles poisoned first (what the copies do not write stays 0xff), the generic-proxy stores
  // ordered before the async proxy's writes.
  for (int b = threadIdx.x; b < chunks * kChunkBytes; b += blockDim.x) tiles[b] = 0xff;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    if (smem_addr(tiles) % 1024 != 0) __trap();  // (the swizzle atoms must be aligned)
    mbar_init(&bar, 1);
    fence_barrier_init();
    mbar_arrive_expect_tx(&bar, uint32_t(chunks * kChunkBytes));
    for (int c = 0; c < chunks; ++c)
      for (int i = 0; i < kTileRows; ++i)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
            "[%4];" ::"r"(smem_addr(tiles + c * kChunkBytes + i * 128)),
            "l"(reinterpret_cast<uint64_t>(&map)), "r"(c * 64), "r"(ids[i]), "r"(smem_addr(&bar))
            : "memory");
  }
  __syncthreads();
  mbar_wait(&bar, 0);
  for (int b = threadIdx.x; b < chunks * kChunkBytes; b += blockDim.x) out[b] = tiles[b];
}

TEST(TmaRowGather, OneRowBoxesLandInTheTokenTilesSwizzle) {
  FP4MOE_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9)  // (built for sm_90a only)
    GTEST_SKIP() << "an sm_90a build (device is sm_" << prop.major << prop.minor << ")";
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
            cudaSuccess);
  ASSERT_EQ(found, cudaDriverEntryPointSuccess);
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);

  constexpr int64_t kRows = 300, kH = 320;  // 5 chunks of 64 columns
  constexpr int kChunks = int(kH / 64);
  static_assert(kChunks <= kMaxChunks, "tile buffer");
  auto rng = testing::make_rng(0x7a3a);
  std::vector<uint16_t> x(kRows * kH);
  for (auto& v : x) v = uint16_t(rng());
  // Source rows in no order, one repeated, the matrix's last row among them.
  std::vector<int32_t> ids(kTileRows);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(kRows - 1));
  for (auto& id : ids) id = pick(rng);
  ids[5] = ids[2];
  ids[15] = int32_t(kRows - 1);

  uint16_t* d_x = nullptr;
  int32_t* d_ids = nullptr;
  uint8_t* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, x.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ids, ids.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, size_t(kChunks) * kChunkBytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0xff, size_t(kChunks) * kChunkBytes), cudaSuccess);  // (and the tiles in the kernel)

  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(kH), cuuint64_t(kRows)};
  const cuuint64_t strides[1] = {cuuint64_t(kH * 2)};  // bytes between rows
  const cuuint32_t box[2] = {64, 1};
  const cuuint32_t elem_strides[2] = {1, 1};
  ASSERT_EQ(encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d_x, dims, strides, box, elem_strides,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_SUCCESS);
  gather_rows_kernel<<<1, 128>>>(map, d_ids, kChunks, d_out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(size_t(kChunks) * kChunkBytes);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_x);
  cudaFree(d_ids);
  cudaFree(d_out);

  // Element k of tile row i (source row ids[i]) where the kernels' token tiles keep it: chunk-major
  // with kTileRows rows a chunk, the piece swizzled by the row.
  int wrong = 0;
  for (int i = 0; i < kTileRows; ++i)
    for (int64_t k = 0; k < kH; ++k) {
      uint16_t got;
      std::memcpy(&got, out.data() + tiled_offset_bytes(i, k, kTileRows), 2);
      const uint16_t want = x[size_t(ids[i]) * kH + k];
      if (got != want && ++wrong <= 5)
        ADD_FAILURE() << "tile row " << i << " (source row " << ids[i] << ") column " << k << ": " << got
                      << ", want " << want;
    }
  EXPECT_EQ(wrong, 0) << "elements out of place";
}

}  // namespace
}  // namespace fp4moe::sm90
