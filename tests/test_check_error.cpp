// tools/check_error.h: fp4moe-bench's --check measures, on outputs made wrong on purpose.
#include "tools/check_error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "src/common/hash_rng.h"

namespace fp4moe {
namespace {

// A value in [-1, 1) from an index (the library's splitmix64): the same on every standard library.
double unit(uint64_t i) { return double(detail::splitmix64(i) >> 11) / double(1ull << 52) - 1.0; }

struct Sample {
  std::vector<float> ref;
  std::vector<uint16_t> out;  // ref times (1 + noise * a value in [-1, 1)), rounded to bf16
};

Sample sample(int64_t n, int64_t H, double noise, uint64_t seed) {
  Sample s;
  s.ref.resize(size_t(n * H));
  s.out.resize(s.ref.size());
  for (size_t i = 0; i < s.ref.size(); ++i) {
    s.ref[i] = float(1.7 * unit(seed * 1000003u + 2 * i));
    s.out[i] = float_to_bf16(float(s.ref[i] * (1 + noise * unit(seed * 1000003u + 2 * i + 1))));
  }
  return s;
}

TEST(CheckError, NoiseAtTheSeenLevelPassesBothModes) {
  for (int64_t n : {1, 2, 16, 64}) {
    const Sample s = sample(n, 7168, 3e-3, 7);
    const tools::CheckError e = tools::check_error_of(s.out, s.ref, 7168);
    EXPECT_EQ(e.tokens, n);
    EXPECT_GT(e.rel, 0) << n;  // bf16 rounding alone is not zero
    EXPECT_LT(e.rel, 4e-3) << n;
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
  EXPECT_GT(e.worst_column, 0.4);
  EXPECT_FALSE(tools::check_passes(e, tools::check_tolerance(false)));
  EXPECT_FALSE(tools::check_passes(e, tools::check_tolerance(true)));
}

TEST(CheckError, AnOutlierColumnIsHeldToItsOwnScale) {
  // One column 40x the others (an outlier channel) with the same relative error: it holds most of
  // the output's energy, so against the whole reference's rms its error would look 40x too large.
  const int64_t n = 16, H = 2048, big = 77;
  Sample s = sample(n, H, 3e-3, 11);
  for (int64_t t = 0; t < n; ++t) {
    const size_t i = size_t(t * H + big);
    s.ref[i] *= 40;
    s.out[i] = float_to_bf16(float(s.ref[i] * (1 + 3e-3 * unit(i + 99))));
  }
  const tools::CheckError e = tools::check_error_of(s.out, s.ref, H);
  EXPECT_TRUE(tools::check_passes(e, tools::check_tolerance(false))) << e.rel << " " << e.worst_column;
  // ... and a wrong outlier column still fails.
  for (int64_t t = 0; t < n; ++t) s.out[size_t(t * H + big)] = float_to_bf16(0.9f * s.ref[size_t(t * H + big)]);
  EXPECT_FALSE(tools::check_passes(tools::check_error_of(s.out, s.ref, H), tools::check_tolerance(true)));
}

TEST(CheckError, TheColumnBoundWidensBelowSixteenTokens) {
  EXPECT_DOUBLE_EQ(tools::column_tolerance(8e-3, 16), 4 * 8e-3);
  EXPECT_DOUBLE_EQ(tools::column_tolerance(8e-3, 64), 4 * 8e-3);
  EXPECT_DOUBLE_EQ(tools::column_tolerance(8e-3, 4), 8 * 8e-3);
  EXPECT_DOUBLE_EQ(tools::column_tolerance(8e-3, 1), 16 * 8e-3);
}

TEST(CheckError, NanZeroReferenceAndBadSizesFail) {
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
  const Sample ok = sample(2, 256, 0, 6);
  EXPECT_TRUE(tools::check_passes(tools::check_error_of(ok.out, ok.ref, 256), 1e-2));
  EXPECT_FALSE(tools::check_passes(tools::check_error_of(ok.out, ok.ref, 0), 1.0));    // H = 0
  EXPECT_FALSE(tools::check_passes(tools::check_error_of(ok.out, ok.ref, 300), 1.0));  // not n x H
  EXPECT_FALSE(tools::check_passes(tools::check_error_of({}, ok.ref, 256), 1.0));      // out too short
  EXPECT_FALSE(tools::check_passes(tools::check_error_of({}, {}, 256), 1.0));          // nothing sampled
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
