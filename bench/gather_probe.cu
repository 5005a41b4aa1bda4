// fp4moe-gather-probe: could GEMM1's producer gather its token tiles straight from the hidden states,
// fast enough to drop the permute (docs/perf-notes.md, the plan after session 26)? Each SM runs one
// CTA that streams K chunks of a token tile of `rows` rows (128 bytes a row and 64-column chunk, as
// the sm90 GEMMs' B slots hold them, src/gemm/sm90/traits.cuh's kOffB: src/moe/workspace.h's
// tiled_offset_bytes) through `stages` shared-memory stages, one consumer warp releasing each stage
// as soon as it is full, three ways:
//   bulk      one bulk copy of rows x 128 contiguous bytes a chunk from a pre-tiled buffer: what the
//             producer does today from the permuted activations
//   tma-rows  one TMA copy of a one-row box a row and chunk (a tensor map over the [T, H] hidden
//             states, SWIZZLE_128B: tests/test_tma_row_gather_gpu.cu checks where the bytes land),
//             from one thread, rows at random
//   cp-async  the producer warpgroup's 128 threads copying 16-byte pieces with cp.async to their
//             swizzled places, rows at random, each thread's copies completing on the stage's
//             barrier (cp.async.mbarrier.arrive.noinc)
// for tiles of 16, 80 and 128 rows. It prints the bytes an SM receives per cycle (clock64 over each
// CTA's stream, the median CTA) and the GPU's GB/s (events). Timing only: nothing reads the data.
// For scale: GEMM1 at DeepSeek-R1 T=2048 (BN80) takes ~10 KB of token rows per ~860-cycle chunk
// (~12 bytes a cycle per SM), at T=8192 (BN128) ~16 KB per ~1000 cycles (session 26's traces).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "src/gemm/sm90/ptx.cuh"
#include "tools/cli_args.h"

namespace {

using namespace fp4moe::sm90;

#define CHECK_CUDA(x)                                                                           \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "fp4moe-gather-probe: %s: %s\n", #x, cudaGetErrorString(e_));         \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

enum Mode { kBulk = 0, kTmaRows = 1, kCpAsync = 2 };
const char* const kModeNames[] = {"bulk", "tma-rows", "cp-async"};
constexpr int kMaxRows = 128;
constexpr int kMaxStages = 8;
constexpr int kThreads = 160;  // a producer warpgroup and one consumer warp

struct ProbeArgs {
  const uint8_t* tiled;      // bulk: [H / 64][rows_cap][128 bytes]
  const uint16_t* hidden;    // cp-async: [T][H] bf16
  const int32_t* row_ids;    // [gridDim.x][kMaxRows] rows of the hidden states
  int rows, chunks, stages;
  int64_t H, rows_cap;
  unsigned long long* cycles;  // [gridDim.x]
};

__device__ __forceinline__ void tma_row(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1) gather_kernel(const __grid_constant__ CUtensorMap map, ProbeArgs a) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ alignas(8) uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ int32_t ids[kMaxRows];
  const int tid = threadIdx.x;
  const int rows = a.rows, stages = a.stages;
  const uint32_t stage_bytes = uint32_t(rows) * 128;
  const int col_chunks = int(a.H / 64);
  if (tid < rows) ids[tid] = a.row_ids[blockIdx.x * kMaxRows + tid];
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], kMode == kCpAsync ? 128 : 1);
      mbar_init(&empty[s], 1);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const long long from = clock64();
  if (tid < 128) {
    // ---- producer ----
    if (kMode != kCpAsync && tid != 0) return;
    // cp-async: thread tid copies piece tid % 8 of rows tid / 8, tid / 8 + 16, ... (128 % 8 == 0)
    const int j = tid % 8;
    const int64_t row0 = (int64_t(blockIdx.x) * 37) % (a.rows_cap - rows);
    for (int k = 0; k < a.chunks; ++k) {
      const int s = k % stages;
      const uint32_t phase = uint32_t(k / stages) & 1;
      mbar_wait(&empty[s], phase ^ 1);
      uint8_t* const dst = smem + s * stage_bytes;
      const int c = k % col_chunks;
      if constexpr (kMode == kBulk) {
        mbar_arrive_expect_tx(&full[s], stage_bytes);
        bulk_g2s(dst, a.tiled + (int64_t(c) * a.rows_cap + row0) * 128, stage_bytes, &full[s], policy_evict_last());
      } else if constexpr (kMode == kTmaRows) {
        mbar_arrive_expect_tx(&full[s], stage_bytes);
        for (int r = 0; r < rows; ++r) tma_row(dst + r * 128, &map, c * 64, ids[r], &full[s]);
      } else {
        for (int r = tid / 8; r < rows; r += 16)
          cp_async16(dst + r * 128 + ((j ^ (r % 8)) * 16), a.hidden + int64_t(ids[r]) * a.H + c * 64 + j * 8);
        cp_async_arrive(&full[s]);
      }
    }
    return;
  }
  // ---- consumer warp ----
  for (int k = 0; k < a.chunks; ++k) {
    const int s = k % stages;
    mbar_wait(&full[s], uint32_t(k / stages) & 1);
    __syncwarp();
    if (tid % 32 == 0) mbar_arrive(&empty[s]);
  }
  if (tid == 128) a.cycles[blockIdx.x] = (unsigned long long)(clock64() - from);
}

}  // namespace

int main(int argc, char** argv) {
  int chunks = 2048;
  if (argc > 2) {
    std::fprintf(stderr, "usage: fp4moe-gather-probe [CHUNKS (1..65536, default 2048)]\n");
    return 2;
  }
  if (argc == 2) {
    int64_t x = 0;
    const std::string err = fp4moe::cli::parse_int("CHUNKS", argv[1], 1, 65536, &x);
    if (!err.empty()) {
      std::fprintf(stderr, "fp4moe-gather-probe: %s\nusage: fp4moe-gather-probe [CHUNKS]\n", err.c_str());
      return 2;
    }
    chunks = int(x);
  }
  int dev = 0;
  CHECK_CUDA(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9) {
    std::fprintf(stderr, "fp4moe-gather-probe: needs an sm_90 GPU (this is sm_%d%d)\n", prop.major, prop.minor);
    return 1;
  }
  const int sms = prop.multiProcessorCount;
  constexpr int64_t T = 2048, H = 7168, rows_cap = 2048;  // DeepSeek-R1's hidden states at T=2048 (29 MB)

  std::mt19937_64 rng(26);
  std::vector<uint16_t> hidden(size_t(T * H));
  for (auto& v : hidden) v = uint16_t(rng());
  std::vector<int32_t> ids(size_t(sms) * kMaxRows);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(T));
  uint16_t* d_hidden = nullptr;
  uint8_t* d_tiled = nullptr;
  int32_t* d_ids = nullptr;
  unsigned long long* d_cycles = nullptr;
  CHECK_CUDA(cudaMalloc(&d_hidden, hidden.size() * 2));
  CHECK_CUDA(cudaMalloc(&d_tiled, size_t(H / 64) * rows_cap * 128));
  CHECK_CUDA(cudaMalloc(&d_ids, ids.size() * 4));
  CHECK_CUDA(cudaMalloc(&d_cycles, size_t(sms) * 8));
  CHECK_CUDA(cudaMemcpy(d_hidden, hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_tiled, hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));  // (any bytes)
  CHECK_CUDA(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));

  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "fp4moe-gather-probe: no cuTensorMapEncodeTiled in the driver\n");
    return 1;
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(H), cuuint64_t(T)};
  const cuuint64_t strides[1] = {cuuint64_t(H * 2)};
  const cuuint32_t box[2] = {64, 1};
  const cuuint32_t elem_strides[2] = {1, 1};
  if (reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
          &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d_hidden, dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "fp4moe-gather-probe: cuTensorMapEncodeTiled failed\n");
    return 1;
  }

  // 120 KB of dynamic shared memory a CTA whatever its stages need: one CTA per SM. Four stages
  // (64 KB at 128 rows), as the decode kernels keep in flight.
  constexpr int kSmem = 120 * 1024, kStages = 4;
  static_assert(kStages <= kMaxStages && kStages * kMaxRows * 128 + 1024 <= kSmem, "stages");
  auto kernels = {gather_kernel<kBulk>, gather_kernel<kTmaRows>, gather_kernel<kCpAsync>};
  for (auto k : kernels) CHECK_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::printf("fp4moe-gather-probe: %s, %d SMs, %d chunks a CTA, hidden states [%lld, %lld] bf16\n", prop.name, sms,
              chunks, (long long)T, (long long)H);
  std::printf("%-9s %5s %7s %14s %10s\n", "mode", "rows", "stages", "B/cycle/SM", "GB/s");
  int mode = 0;
  for (auto k : kernels) {
    for (int rows : {16, 80, 128}) {
      ProbeArgs a{d_tiled, d_hidden, d_ids, rows, chunks, kStages, H, rows_cap, d_cycles};
      k<<<sms, kThreads, kSmem>>>(map, a);  // warm-up
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaEventRecord(e0));
      k<<<sms, kThreads, kSmem>>>(map, a);
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      std::vector<unsigned long long> cycles(static_cast<size_t>(sms));
      CHECK_CUDA(cudaMemcpy(cycles.data(), d_cycles, cycles.size() * 8, cudaMemcpyDeviceToHost));
      std::nth_element(cycles.begin(), cycles.begin() + sms / 2, cycles.end());
      const double bytes_cta = double(chunks) * rows * 128;
      std::printf("%-9s %5d %7d %14.1f %10.0f\n", kModeNames[mode], rows, a.stages, bytes_cta / double(cycles[sms / 2]),
                  bytes_cta * sms / (ms * 1e-3) / 1e9);
    }
    ++mode;
  }
  return 0;
}
