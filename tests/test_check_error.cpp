// tools/check_error.h: fp4moe-bench's --check measures, on outputs made wrong on purpose.
#include "tools/check_error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace fp4moe {
namespace {

struct Sample {
  std::vector<float> ref;
  std::vector<uint16_t> out;  // ref rounded to bf16, with a relative noise of `noise` first
};

Sample sample(int64_t n, int64_t H, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  Sample s;
  s.ref.resize(size_t(n * H));
  s.out.resize(s.ref.size());
  for (size_t i = 0; i < s.ref.size(); ++i) {
    s.ref[i] = d(rng);
    s.out[i] = float_to_bf16(float(s.ref[i] * (1 + noise * d(rng))));
  }
  return s;
}

TEST(CheckError, NoiseAtTheSeenLevelPassesBothModes) {
  for (int64_t n : {1, 16, 64}) {
    const Sample s = sample(n, 2048, 2e-3, 7u + uint32_t(n));
    const tools::CheckError e = tools::check_error_of(s.out, s.ref, 2048);
    EXPECT_GT(e.rel, 0) << n;  // bf16 rounding alone is not zero
    EXPECT_LT(e.rel, 5e-3) << n;
    EXPECT_TRUE(tools::check_passes(e, tools::check_tolerance(false))) << n << " " << e.rel << " " << e.worst_column;
    EXPECT_TRUE(tools::check_passes(e, tools::check_tolerance(true))) << n;
  }
}

TEST(CheckError, OneWrongColumnFailsWhereTheFrobeniusRatioPasses) {
  const int64_t n = 16, H = 7168, bad = 1234;
  Sample s = sample(n, H, 0, 3);
  // One channel at half its value (a dropped channel is 1 / sqrt(H) = 1.2e-2 in the Frobenius ratio,
  // past w4a16's bound but within w4a4's)
  for (int64_t t = 0; t < n; ++t) s.out[size_t(t * H + bad)] = float_to_bf16(0.5f * s.ref[size_t(t * H + bad)]);
  const tools::CheckError e = tools::check_error_of(s.out, s.ref, H);
  EXPECT_LT(e.rel, tools::check_tolerance(false)) << "the Frobenius ratio alone would pass";
  EXPECT_EQ(e.column, bad);
  EXPECT_GT(e.worst_column, 0.3);
  EXPECT_FALSE(tools::check_passes(e, tools::check_tolerance(false)));
  EXPECT_FALSE(tools::check_passes(e, tools::check_tolerance(true)));
}

TEST(CheckError, NanAndZeroReferenceFail) {
  Sample s = sample(4, 256, 0, 5);
  s.out[300] = 0x7fc0;  // a bf16 NaN (the bench's poison)
  tools::CheckError e = tools::check_error_of(s.out, s.ref, 256);
  EXPECT_FALSE(std::isfinite(e.rel));
  EXPECT_FALSE(tools::check_passes(e, 1.0));
  const std::vector<float> zero(256, 0.0f);
  const std::vector<uint16_t> out(256, 0);
  e = tools::check_error_of(out, zero, 256);
  EXPECT_FALSE(std::isfinite(e.rel));
  EXPECT_FALSE(tools::check_passes(e, 1.0));
}

TEST(CheckError, AScaledOutputFailsTheFrobeniusRatio) {
  Sample s = sample(8, 512, 0, 9);
  for (auto& v : s.out) v = float_to_bf16(bf16_to_float(v) * 1.05f);  // a wrong scale everywhere
  const tools::CheckError e = tools::check_error_of(s.out, s.ref, 512);
  EXPECT_NEAR(e.rel, 0.05, 5e-3);
  EXPECT_FALSE(tools::check_passes(e, tools::check_tolerance(false)));
}

}  // namespace
}  // namespace fp4moe
