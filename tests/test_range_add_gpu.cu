// The two adds of a GEMM2 over canonical K ranges (src/gemm/sm90/consumer.cuh): an unsplit work
// unit adds its middle ranges' sums to the running total in L2 (red_add_f32x4), the last one and a
// split's fixup in registers (add_rn_ftz). A split gives the same bits as no split only if both
// adds round alike, subnormals included: here both must match a host model of add.rn.ftz.f32
// (subnormal inputs and results flushed to sign-preserving zero) on random words and on the edge
// cases, after a store and two reductions by the same thread, read back by that thread.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "src/gemm/sm90/ptx.cuh"
#include "test_util.h"

namespace fp4moe::sm90 {
namespace {

// total = a; total += b; total += c (two reductions in L2); seen = the thread's own load of total;
// regs = add_rn_ftz(add_rn_ftz(a, b), c).
__global__ void range_add_kernel(const float4* a, const float4* b, const float4* c, float4* total, float4* seen,
                                 float4* regs, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float4 x = a[i], y = b[i], z = c[i];
  __stcg(&total[i], x);
  red_add_f32x4(reinterpret_cast<float*>(&total[i]), y.x, y.y, y.z, y.w);
  red_add_f32x4(reinterpret_cast<float*>(&total[i]), z.x, z.y, z.z, z.w);
  seen[i] = __ldcg(&total[i]);
  regs[i] = make_float4(add_rn_ftz(add_rn_ftz(x.x, y.x), z.x), add_rn_ftz(add_rn_ftz(x.y, y.y), z.y),
                        add_rn_ftz(add_rn_ftz(x.z, y.z), z.z), add_rn_ftz(add_rn_ftz(x.w, y.w), z.w));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }
float add_ftz_model(float a, float b) { return flush(flush(a) + flush(b)); }  // host: round to nearest even

TEST(RangeAdd, ReductionInL2AndRegisterAddGiveTheSameBits) {
  FP4MOE_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9)  // (built for sm_90a only; red.global.add.v4.f32 needs sm_90)
    GTEST_SKIP() << "an sm_90a build (device is sm_" << prop.major << prop.minor << ")";
  auto rng = testing::make_rng(0x5eed2025u);
  // Random words of every exponent (NaNs left out: their payloads are not specified), then edge cases
  // appended: subnormal inputs, a normal sum that is subnormal, signed zeros, exact cancellation,
  // infinities, the largest finite values overflowing.
  constexpr int kRandom = 1 << 16;
  std::vector<float> a, b, c;
  auto word = [&]() {
    for (;;) {
      const float f = from_bits(uint32_t(rng()));
      if (!std::isnan(f)) return f;
    }
  };
  for (int i = 0; i < kRandom; ++i) {
    a.push_back(word());
    // every fourth b and c near a's magnitude, so that the sums cancel and round
    b.push_back(i % 4 == 0 ? -a.back() * 0.75f : word());
    c.push_back(i % 4 == 1 ? -a.back() : word());
  }
  const float tiny = std::numeric_limits<float>::min();  // the smallest normal
  const float sub = std::numeric_limits<float>::denorm_min();
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  const float edge[][3] = {
      {sub, sub, 0.0f},         {tiny * 0.5f, 1.0f, -1.0f}, {1.5f * tiny, -tiny, 0.0f}, {-1.5f * tiny, tiny, sub},
      {0.0f, -0.0f, -0.0f},     {-0.0f, -0.0f, -0.0f},      {1.0f, -1.0f, -0.0f},       {inf, 1.0f, -big},
      {-inf, -sub, 1.0f},       {big, big, -big},           {1.0f, 0x1p-24f, 0x1p-24f}, {3.0f * tiny, -tiny, -tiny},
  };
  for (const auto& e : edge) a.push_back(e[0]), b.push_back(e[1]), c.push_back(e[2]);
  while (a.size() % 4) a.push_back(1.0f), b.push_back(2.0f), c.push_back(3.0f);
  const int n4 = int(a.size() / 4);
  const size_t bytes = a.size() * sizeof(float);
  float *da, *db, *dc, *total, *seen, *regs;
  for (float** p : {&da, &db, &dc, &total, &seen, &regs}) ASSERT_EQ(cudaMalloc(p, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  for (float* p : {total, seen, regs}) ASSERT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess);  // poison (a NaN)
  range_add_kernel<<<(n4 + 127) / 128, 128>>>(reinterpret_cast<const float4*>(da), reinterpret_cast<const float4*>(db),
                                              reinterpret_cast<const float4*>(dc), reinterpret_cast<float4*>(total),
                                              reinterpret_cast<float4*>(seen), reinterpret_cast<float4*>(regs), n4);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got_total(a.size()), got_seen(a.size()), got_regs(a.size());
  ASSERT_EQ(cudaMemcpy(got_total.data(), total, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got_seen.data(), seen, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got_regs.data(), regs, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float* p : {da, db, dc, total, seen, regs}) cudaFree(p);
  int flushed = 0, nonzero = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float want = add_ftz_model(add_ftz_model(a[i], b[i]), c[i]);
    const float exact_first = a[i] + b[i];
    if (exact_first != 0.0f && std::fpclassify(exact_first) == FP_SUBNORMAL) ++flushed;
    if (want != 0.0f) ++nonzero;
    if (std::isnan(want)) {  // inf - inf: any NaN
      EXPECT_TRUE(std::isnan(got_regs[i]) && std::isnan(got_seen[i]) && std::isnan(got_total[i])) << i;
      continue;
    }
    ASSERT_EQ(bits(got_regs[i]), bits(want)) << "register add, element " << i << ": " << a[i] << " + " << b[i]
                                             << " + " << c[i];
    ASSERT_EQ(bits(got_seen[i]), bits(want)) << "L2 reductions as loaded by the thread, element " << i << ": "
                                             << a[i] << " + " << b[i] << " + " << c[i];
    ASSERT_EQ(bits(got_total[i]), bits(want)) << "L2 reductions, element " << i;
  }
  EXPECT_GT(flushed, 0);  // the edge cases reach a subnormal sum
  EXPECT_GT(nonzero, kRandom / 2);
}

}  // namespace
}  // namespace fp4moe::sm90
