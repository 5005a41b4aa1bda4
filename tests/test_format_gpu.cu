// GPU codec: byte-identical to the host codec; host emulation of rcp.approx and e4m3 conversion
// checked against the hardware instructions.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "fp4moe/format.h"
#include "src/format/block_codec.h"
#include "src/format/rcp_approx.h"
#include "test_util.h"

namespace fp4moe {
namespace {

using testing::DeviceBuffer;
using testing::make_rng;

// Per significand m of 1.m: 0 if the hardware equals the correctly rounded reciprocal, 1 if it is one
// ulp above, 2 if one ulp below, 3 otherwise. Packed 4 per byte, low bits first.
__global__ void rcp_delta_kernel(uint8_t* delta) {
  for (uint32_t m4 = blockIdx.x * blockDim.x + threadIdx.x; m4 < (1u << 21); m4 += gridDim.x * blockDim.x) {
    uint8_t byte = 0;
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t m = m4 * 4 + i;
      const uint32_t hw = __float_as_uint(rcp_approx_ftz(__uint_as_float(0x3f800000u | m)));
      const uint32_t rn = detail::rcp_base_bits(m);
      const uint32_t d = hw == rn ? 0 : hw == rn + 1 ? 1 : hw == rn - 1 ? 2 : 3;
      byte |= uint8_t(d << (2 * i));
    }
    delta[m4] = byte;
  }
}

__global__ void rcp_eval_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = rcp_approx_ftz(x[i]);
}

TEST(RcpApprox, MatchesHardware) {
  FP4MOE_REQUIRE_GPU();
  DeviceBuffer<uint8_t> delta(size_t(1) << 21);
  rcp_delta_kernel<<<1024, 256>>>(delta.get());
  CUDA_ASSERT(cudaDeviceSynchronize());
  const std::vector<uint8_t> measured = delta.download();
  size_t counts[4] = {0, 0, 0, 0};
  for (uint8_t b : measured)
    for (int i = 0; i < 4; ++i) ++counts[(b >> (2 * i)) & 3];
  std::printf("[fp4moe] rcp.approx.ftz vs correctly rounded 1/1.m over 2^23 significands: equal %zu, +1 ulp %zu, "
              "-1 ulp %zu, other %zu\n", counts[0], counts[1], counts[2], counts[3]);
  ASSERT_EQ(counts[3], 0u) << "a difference beyond one ulp: the 2-bit table cannot represent it";
  const bool same = measured.size() == detail::kRcpDeltaBytes &&
                    std::memcmp(measured.data(), detail::kRcpDelta, measured.size()) == 0;
  if (!same) {
    const char* path = std::getenv("FP4MOE_RCP_TABLE_OUT");
    const std::string out = path ? path : "rcp_approx_delta.bin";
    std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(measured.data()), measured.size());
    FAIL() << "the compiled table (" << detail::kRcpDeltaBytes << " bytes) does not match this GPU's rcp.approx; "
           << "measured table written to " << out << " (commit it as src/format/rcp_approx_delta.bin)";
  }
  // The exponent-independence assumption of the emulation, on random bit patterns and edge cases.
  auto rng = make_rng(11);
  std::vector<float> x;
  for (int i = 0; i < 1 << 20; ++i) x.push_back(bits_float(uint32_t(rng())));
  for (float v : {0.0f, -0.0f, 1e-40f, INFINITY, -INFINITY, 1.0f, 6.0f, 3e38f, 1.2e-38f}) x.push_back(v);
  DeviceBuffer<float> dx(x), dy(x.size());
  rcp_eval_kernel<<<unsigned((x.size() + 255) / 256), 256>>>(dx.get(), dy.get(), int(x.size()));
  CUDA_ASSERT(cudaDeviceSynchronize());
  auto y = dy.download();
  int bad = 0;
  for (size_t i = 0; i < x.size() && bad < 10; ++i) {
    const float h = rcp_approx_ftz_host(x[i]);
    if (std::isnan(h) && std::isnan(y[i])) continue;
    if (float_bits(h) != float_bits(y[i])) {
      ADD_FAILURE() << "rcp(" << x[i] << " = 0x" << std::hex << float_bits(x[i]) << "): host 0x" << float_bits(h)
                    << " device 0x" << float_bits(y[i]) << std::dec;
      ++bad;
    }
  }
}

__global__ void e4m3_exhaustive_kernel(unsigned long long* mismatches, uint32_t* first) {
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (1ull << 32);
       u += uint64_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(uint32_t(u));
    const uint8_t hw = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    const uint8_t sw = float_to_e4m3(x);
    const bool both_nan = (hw & 0x7f) == 0x7f && (sw & 0x7f) == 0x7f;
    if (hw != sw && !both_nan) {
      if (atomicAdd(mismatches, 1ull) == 0) *first = uint32_t(u);
    }
  }
}

TEST(E4m3, IntegerConversionMatchesHardwareOnAllFloats) {
  FP4MOE_REQUIRE_GPU();
  DeviceBuffer<unsigned long long> mism(1);
  DeviceBuffer<uint32_t> first(1);
  CUDA_ASSERT(cudaMemset(mism.get(), 0, 8));
  e4m3_exhaustive_kernel<<<4096, 256>>>(mism.get(), first.get());
  CUDA_ASSERT(cudaDeviceSynchronize());
  const auto n = mism.download()[0];
  EXPECT_EQ(n, 0ull) << "first mismatch at float bits 0x" << std::hex << first.download()[0];
}

// Equal bits, or both NaN (NaN payloads differ between the CPU and the GPU).
void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Random rows with planted special blocks: zero, NaN, inf, tiny, huge.
std::vector<float> hostile_rows(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  auto x = testing::random_floats(rng, rows * cols, -8.0f, 8.0f);
  const int64_t len = std::min<int64_t>(32, cols), num_blocks = cols / len;
  // From row 1 on, so a one-row input keeps its random values.
  for (int64_t r = 1; r < rows; r += 5) {
    const int64_t b = (r / 5) % num_blocks;
    float* blk = &x[r * cols + b * len];
    switch ((r / 5) % 4) {
      case 0: std::fill(blk, blk + len, 0.0f); break;
      case 1: blk[3] = NAN; break;
      case 2: blk[7] = -INFINITY; break;
      case 3: for (int i = 0; i < len; ++i) blk[i] *= 1e-30f; break;
    }
  }
  return x;
}

TEST(Nvfp4Gpu, QuantizeAndDequantizeMatchHostBytes) {
  FP4MOE_REQUIRE_GPU();
  auto rng = make_rng(12);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 16}, {7, 64}, {127, 160}, {300, 2048}}) {
    auto xf = hostile_rows(rng, rows, cols);
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = float_to_bf16(xf[i]);
    DeviceBuffer<float> dxf(xf);
    DeviceBuffer<uint16_t> dxb(xb);
    for (InputType type : {InputType::kF32, InputType::kBF16}) {
      for (Nvfp4Recipe recipe : {Nvfp4Recipe::kKernel, Nvfp4Recipe::kModelopt}) {
        for (ScaleLayout layout : {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4}) {
          for (GlobalScale g : {GlobalScale::encode(2688.0f / 7.3f), GlobalScale::decode(7.3f / 2688.0f)}) {
            Nvfp4QuantizeParams p{rows, cols, recipe, g, layout};
            const size_t sb = scale_bytes(layout, rows, cols / 16);
            std::vector<uint8_t> hp(rows * cols / 2), hs(sb);
            const void* hx = type == InputType::kF32 ? static_cast<const void*>(xf.data()) : xb.data();
            const void* dx = type == InputType::kF32 ? static_cast<const void*>(dxf.get()) : dxb.get();
            ASSERT_OK(quantize_nvfp4_cpu(p, hx, type, hp.data(), hs.data()));
            DeviceBuffer<uint8_t> dp(hp.size()), ds(sb);
            ASSERT_OK(quantize_nvfp4_gpu(p, dx, type, dp.get(), ds.get(), nullptr));
            CUDA_ASSERT(cudaDeviceSynchronize());
            ASSERT_EQ(dp.download(), hp) << "packed, rows " << rows << " recipe " << to_string(recipe);
            ASSERT_EQ(ds.download(), hs) << "scales, rows " << rows << " recipe " << to_string(recipe);
            std::vector<float> hd(rows * cols);
            ASSERT_OK(dequantize_nvfp4_cpu(rows, cols, hp.data(), hs.data(), layout, g, hd.data()));
            DeviceBuffer<float> dd(rows * cols);
            ASSERT_OK(dequantize_nvfp4_gpu(rows, cols, dp.get(), ds.get(), layout, g, dd.get(), nullptr));
            CUDA_ASSERT(cudaDeviceSynchronize());
            expect_same_floats(dd.download(), hd);
            double finite_norm = 0;
            for (float v : hd) finite_norm += std::isfinite(v) ? double(v) * v : 0.0;
            EXPECT_GT(finite_norm, 0.0);
          }
        }
      }
    }
  }
}

TEST(Mxfp4Gpu, QuantizeAndDequantizeMatchHostBytes) {
  FP4MOE_REQUIRE_GPU();
  auto rng = make_rng(13);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {127, 96}, {300, 2880}}) {
    auto xf = hostile_rows(rng, rows, cols);
    DeviceBuffer<float> dx(xf);
    std::vector<uint8_t> hp(rows * cols / 2), hs(rows * cols / 32);
    ASSERT_OK(quantize_mxfp4_cpu(rows, cols, xf.data(), InputType::kF32, hp.data(), hs.data()));
    DeviceBuffer<uint8_t> dp(hp.size()), ds(hs.size());
    ASSERT_OK(quantize_mxfp4_gpu(rows, cols, dx.get(), InputType::kF32, dp.get(), ds.get(), nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    ASSERT_EQ(dp.download(), hp);
    ASSERT_EQ(ds.download(), hs);
    std::vector<float> hd(rows * cols);
    ASSERT_OK(dequantize_mxfp4_cpu(rows, cols, hp.data(), hs.data(), hd.data()));
    DeviceBuffer<float> dd(rows * cols);
    ASSERT_OK(dequantize_mxfp4_gpu(rows, cols, dp.get(), ds.get(), dd.get(), nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    expect_same_floats(dd.download(), hd);
    double finite_norm = 0;
    for (float v : hd) finite_norm += std::isfinite(v) ? double(v) * v : 0.0;
    EXPECT_GT(finite_norm, 0.0);
  }
}

TEST(ScaleLayoutGpu, SwizzleMatchesHost) {
  FP4MOE_REQUIRE_GPU();
  auto rng = make_rng(14);
  for (auto [rows, ksf] : {std::pair<int64_t, int64_t>{1, 1}, {129, 7}, {4096, 448}}) {
    std::vector<uint8_t> lin(rows * ksf);
    for (auto& b : lin) b = uint8_t(rng());
    std::vector<uint8_t> hs(scale_bytes(ScaleLayout::kSwizzled128x4, rows, ksf));
    ASSERT_OK(swizzle_scales_cpu(rows, ksf, lin.data(), hs.data()));
    DeviceBuffer<uint8_t> dl(lin), ds(hs.size()), back(lin.size());
    ASSERT_OK(swizzle_scales_gpu(rows, ksf, dl.get(), ds.get(), nullptr));
    ASSERT_OK(unswizzle_scales_gpu(rows, ksf, ds.get(), back.get(), nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(ds.download(), hs);
    EXPECT_EQ(back.download(), lin);
  }
}

// A launch check takes the pending error (it does not only peek at it): an error surfaces once, and
// the next call runs. Here the pending error is a refused cudaSetDevice's (the runtime keeps a
// thread's last error until it is taken), which the next launch check reports; the call after it
// must succeed and be right.
TEST(ScaleLayoutGpu, AnErrorIsReportedOnceThenCallsRun) {
  FP4MOE_REQUIRE_GPU();
  std::vector<uint8_t> lin(129 * 7);
  auto rng = make_rng(15);
  for (auto& b : lin) b = uint8_t(rng());
  std::vector<uint8_t> hs(scale_bytes(ScaleLayout::kSwizzled128x4, 129, 7));
  ASSERT_OK(swizzle_scales_cpu(129, 7, lin.data(), hs.data()));
  DeviceBuffer<uint8_t> dl(lin), ds(hs.size());
  int count = 0;
  CUDA_ASSERT(cudaGetDeviceCount(&count));
  ASSERT_NE(cudaSetDevice(count + 7), cudaSuccess);
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice) << "the test needs a pending error";
  const Status first = swizzle_scales_gpu(129, 7, dl.get(), ds.get(), nullptr);
  EXPECT_EQ(first.code(), StatusCode::kCudaError) << first.to_string();
  EXPECT_NE(first.message().find("cudaErrorInvalidDevice"), std::string::npos) << first.message();
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the launch check left the error pending";
  ds.poison();
  ASSERT_OK(swizzle_scales_gpu(129, 7, dl.get(), ds.get(), nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(ds.download(), hs);
}

TEST(Nvfp4Gpu, RejectsMisalignedAndBadShapes) {
  FP4MOE_REQUIRE_GPU();
  DeviceBuffer<float> x(64);
  DeviceBuffer<uint8_t> p(64), s(8);
  Nvfp4QuantizeParams q{2, 32, Nvfp4Recipe::kKernel, GlobalScale::encode(1.0f), ScaleLayout::kLinear};
  Status st = quantize_nvfp4_gpu(q, reinterpret_cast<const char*>(x.get()) + 4, InputType::kF32, p.get(), s.get(),
                                 nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x = "), std::string::npos) << st.message();
  q.cols = 40;
  const Status bad_cols = quantize_nvfp4_gpu(q, x.get(), InputType::kF32, p.get(), s.get(), nullptr);
  EXPECT_NE(bad_cols.message().find("cols = 40"), std::string::npos) << bad_cols.message();
  // MXFP4's dequantize stores floats: an output off 4-byte alignment is refused, not faulted on.
  DeviceBuffer<float> out(64);
  const Status misaligned = dequantize_mxfp4_gpu(
      2, 32, p.get(), s.get(), reinterpret_cast<float*>(reinterpret_cast<char*>(out.get()) + 2), nullptr);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument) << misaligned.to_string();
  EXPECT_NE(misaligned.message().find("dequantize_mxfp4_gpu: out = "), std::string::npos) << misaligned.message();
  // Host memory the device cannot reach is refused by name before the launch.
  int pageable = 0;
  CUDA_ASSERT(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  if (!pageable) {
    q.cols = 32;
    alignas(16) static float host_x[64];
    const Status from_host = quantize_nvfp4_gpu(q, host_x, InputType::kF32, p.get(), s.get(), nullptr);
    EXPECT_EQ(from_host.code(), StatusCode::kInvalidArgument) << from_host.to_string();
    EXPECT_NE(from_host.message().find("quantize_nvfp4_gpu: x = "), std::string::npos) << from_host.message();
    std::vector<float> host_out(64);
    const Status to_host = dequantize_nvfp4_gpu(2, 32, p.get(), s.get(), ScaleLayout::kLinear,
                                                GlobalScale::encode(1.0f), host_out.data(), nullptr);
    EXPECT_EQ(to_host.code(), StatusCode::kInvalidArgument) << to_host.to_string();
    EXPECT_NE(to_host.message().find("out = "), std::string::npos) << to_host.message();
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace fp4moe
