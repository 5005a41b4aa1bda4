// A minimal shared-memory pipeline in the pattern of the sm90 kernels (src/gemm/sm90/): one producer
// thread fills stages with bulk async copies that complete on a `full` mbarrier; a consumer warp
// waits on `full`, reads the stage and releases it on `empty`; the producer waits on `empty` before
// it overwrites the stage. The test checks the data the consumer saw.
//
// It is also a probe for compute-sanitizer's racecheck (scripts/gpu-check.sh, FP4MOE_RACECHECK=1),
// with three ways to release a stage:
//   kOneLane    __syncwarp, then lane 0 arrives (`empty` counts 1)
//   kFenced     the same after fence.proxy.async.shared::cta
//   kEveryLane  every lane arrives (`empty` counts 32), so each thread's arrive releases its own reads
// On an H200 (session 6, bench/results/2026-11-30_h200_racecheck_release.txt) racecheck reported
// races at the probe's lds on the first two (on the kernels the same reports name lds against
// bulk_g2s: ..._run1_overlap_two-ctas_d38a910.txt) and nothing on kEveryLane: it does not carry the other lanes'
// reads through __syncwarp into lane 0's release. The sm90 kernels release the kEveryLane way.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/gemm/sm90/ptx.cuh"
#include "test_util.h"

namespace fp4moe::sm90 {
namespace {

constexpr int kStages = 2;
constexpr int kStageBytes = 1024;
constexpr int kChunks = 16;

enum class Release { kOneLane, kFenced, kEveryLane };

template <Release kRelease>
__global__ void pipeline_probe_kernel(const uint8_t* src, uint32_t* sums) {
  __shared__ alignas(128) uint8_t stage[kStages][kStageBytes];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kRelease == Release::kEveryLane ? 32 : 1);
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (warp == 0) {
    if (lane != 0) return;
    for (int c = 0; c < kChunks; ++c) {
      const int s = c % kStages;
      const uint32_t phase = uint32_t(c / kStages) & 1u;
      mbar_wait(&empty[s], phase ^ 1u);
      mbar_arrive_expect_tx(&full[s], kStageBytes);
      bulk_g2s(stage[s], src + size_t(c) * kStageBytes, kStageBytes, &full[s], policy_evict_first());
    }
    return;
  }
  for (int c = 0; c < kChunks; ++c) {
    const int s = c % kStages;
    mbar_wait(&full[s], uint32_t(c / kStages) & 1u);
    uint32_t sum = 0;
    for (int i = lane * 4; i < kStageBytes; i += 128)
      sum += lds_u32(smem_addr(&stage[s][i])) * 2654435761u + uint32_t(i);
    sums[c * 32 + lane] = sum;
    if constexpr (kRelease == Release::kEveryLane) {
      mbar_arrive(&empty[s]);
    } else {
      if constexpr (kRelease == Release::kFenced) fence_proxy_async_shared();
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
  }
}

template <Release kRelease>
void run_probe() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9)  // (built for sm_90a only; bulk async copies need sm_90)
    GTEST_SKIP() << "an sm_90a build (device is sm_" << prop.major << prop.minor << ")";
  auto rng = testing::make_rng(0x9e3779b9u);
  std::vector<uint8_t> host(size_t(kChunks) * kStageBytes);
  for (auto& b : host) b = uint8_t(rng());
  uint8_t* src = nullptr;
  uint32_t* sums = nullptr;
  ASSERT_EQ(cudaMalloc(&src, host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&sums, kChunks * 32 * sizeof(uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(sums, 0xff, kChunks * 32 * sizeof(uint32_t)), cudaSuccess);  // poison
  pipeline_probe_kernel<kRelease><<<1, 64>>>(src, sums);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> got(kChunks * 32);
  ASSERT_EQ(cudaMemcpy(got.data(), sums, got.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(src);
  cudaFree(sums);
  for (int c = 0; c < kChunks; ++c)
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t want = 0;
      for (int i = lane * 4; i < kStageBytes; i += 128) {
        const uint8_t* p = &host[size_t(c) * kStageBytes + i];
        const uint32_t w = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
        want += w * 2654435761u + uint32_t(i);
      }
      ASSERT_EQ(got[c * 32 + lane], want) << "chunk " << c << " lane " << lane;
    }
}

TEST(PipelineProbe, ConsumerSeesEveryChunk) { run_probe<Release::kOneLane>(); }
TEST(PipelineProbe, ConsumerSeesEveryChunkWithProxyFence) { run_probe<Release::kFenced>(); }
TEST(PipelineProbe, ConsumerSeesEveryChunkEveryLaneReleases) { run_probe<Release::kEveryLane>(); }

}  // namespace
}  // namespace fp4moe::sm90
