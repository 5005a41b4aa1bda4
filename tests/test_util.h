// Shared test helpers: seeded random inputs, GPU detection, device buffers, error norms.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/numerics.h"
#include "fp4moe/status.h"

#if FP4MOE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe::testing {

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    ::fp4moe::Status s_ = (expr);                             \
    ASSERT_TRUE(s_.ok()) << #expr << " -> " << s_.to_string(); \
  } while (0)
#define EXPECT_OK(expr)                                       \
  do {                                                        \
    ::fp4moe::Status s_ = (expr);                             \
    EXPECT_TRUE(s_.ok()) << #expr << " -> " << s_.to_string(); \
  } while (0)

// A fresh seed per test run unless FP4MOE_TEST_SEED is set; printed so a failure can be replayed.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FP4MOE_TEST_SEED");
    uint64_t s = std::random_device{}();
    if (env && *env) {
      char* end = nullptr;
      errno = 0;
      s = std::strtoull(env, &end, 10);
      if (errno != 0 || *end != '\0' || *env < '0' || *env > '9') {
        std::fprintf(stderr, "FP4MOE_TEST_SEED = '%s' is not a decimal integer in [0, 2^64)\n", env);
        std::exit(2);
      }
    }
    std::printf("[fp4moe] FP4MOE_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline std::mt19937_64 make_rng(uint64_t salt = 0) { return std::mt19937_64(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull)); }

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

// Relative L2 error ||a - b|| / ||b||; NaN anywhere gives +inf.
template <typename A, typename B>
double rel_l2(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = double(a[i]), y = double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

template <typename A>
double l2_norm(const A& a) {
  double s = 0;
  for (auto x : a) s += double(x) * double(x);
  return std::sqrt(s);
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string name = prefix;
    name.append("_XXXXXX");  // (not prefix + "...": GCC 12 warns falsely, -Wrestrict)
    std::string tmpl = (std::filesystem::temp_directory_path() / name).string();
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

#if FP4MOE_HAS_CUDA
inline bool gpu_available(std::string* why = nullptr) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

#define FP4MOE_REQUIRE_GPU()                                                  \
  do {                                                                        \
    std::string why_;                                                         \
    if (!::fp4moe::testing::gpu_available(&why_))                             \
      GTEST_SKIP() << "no usable CUDA GPU (" << why_ << "): GPU test skipped"; \
  } while (0)

// The layer's kernels are built for sm_90a only, so creating a layer off compute capability 9.0 is
// refused with kUnsupported; that is the one refusal a GPU test may skip on. On a Hopper GPU any
// failure to create, kUnsupported included, fails the test: a skip there would hide a regression.
inline bool current_device_is_sm90() {
  int d = 0, major = 0, minor = 0;
  if (cudaGetDevice(&d) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) !=
                                              cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

// Skips the test when `status` is that refusal off compute capability 9.0.
#define FP4MOE_SKIP_IF_NOT_HOPPER(status)                                                                     \
  do {                                                                                                        \
    if ((status).code() == ::fp4moe::StatusCode::kUnsupported && !::fp4moe::testing::current_device_is_sm90()) \
      GTEST_SKIP() << "not a compute capability 9.0 device: " << (status).to_string();                        \
  } while (0)

#define FP4MOE_ASSERT_CREATED(expr)                                                                           \
  do {                                                                                                        \
    const ::fp4moe::Status c_ = (expr);                                                                       \
    FP4MOE_SKIP_IF_NOT_HOPPER(c_);                                                                            \
    ASSERT_TRUE(c_.ok()) << #expr << " -> " << c_.to_string();                                                \
  } while (0)

#define CUDA_ASSERT(expr)                                                                     \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    ASSERT_EQ(e_, cudaSuccess) << #expr << " -> " << cudaGetErrorString(e_);                  \
  } while (0)

// RAII device buffer. Poisoned with 0xFF bytes on creation so unwritten outputs are caught (0xFFFF is
// a bf16 NaN, 0xFFFFFFFF an fp32 NaN and int32 -1).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ && cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)) == cudaSuccess) cudaMemset(p_, 0xff, n_ * sizeof(T));
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { if (p_) cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) { cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  void poison() { cudaMemset(p_, 0xff, n_ * sizeof(T)); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};
#endif

}  // namespace fp4moe::testing
