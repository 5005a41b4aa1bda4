// NVFP4 / MXFP4 host codec: exhaustive dequant, rounding ties, saturation, special values, layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "fp4moe/format.h"
#include "fp4moe/numerics.h"
#include "src/format/block_codec.h"
#include "test_util.h"

namespace fp4moe {
namespace {

using testing::make_rng;

// Independent decoders, written from the format definitions rather than from numerics.h.
double e4m3_value(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return NAN;
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}
double e2m1_value(uint8_t c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (c & 8) ? -mag : mag;
}

TEST(E2m1, DecodeMatchesDefinition) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(double(e2m1_to_float(c)), e2m1_value(c)) << "code " << c;
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8)));
}

TEST(E2m1, RoundingTiesGoToEven) {
  // (tie point, code below, code above, expected code at the tie)
  struct Tie { float x; uint8_t lo, hi, at; };
  const Tie ties[] = {{0.25f, 0, 1, 0}, {0.75f, 1, 2, 2}, {1.25f, 2, 3, 2}, {1.75f, 3, 4, 4},
                      {2.5f, 4, 5, 4},  {3.5f, 5, 6, 6},  {5.0f, 6, 7, 6}};
  for (const Tie& t : ties) {
    for (float sign : {1.0f, -1.0f}) {
      const uint8_t s = sign < 0 ? 8 : 0;
      EXPECT_EQ(float_to_e2m1(sign * t.x), s | t.at) << sign * t.x;
      EXPECT_EQ(float_to_e2m1(sign * std::nextafter(t.x, 0.0f)), s | t.lo) << sign * t.x << " - ulp";
      EXPECT_EQ(float_to_e2m1(sign * std::nextafter(t.x, 100.0f)), s | t.hi) << sign * t.x << " + ulp";
    }
  }
  // Exact grid points map to themselves.
  for (int c = 0; c < 16; ++c) EXPECT_EQ(float_to_e2m1(e2m1_to_float(c)), c) << "code " << c;
}

TEST(E2m1, SaturationAndSignedZero) {
  EXPECT_EQ(float_to_e2m1(6.5f), 0x7);
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  EXPECT_EQ(float_to_e2m1(INFINITY), 0x7);
  EXPECT_EQ(float_to_e2m1(-INFINITY), 0xf);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(float_to_e2m1(0.1f), 0x0);
  EXPECT_EQ(float_to_e2m1(NAN), 0x0);
}

TEST(E4m3, DecodeAll256) {
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_value(uint8_t(b));
    const float got = e4m3_to_float(uint8_t(b));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << b;
    else EXPECT_EQ(double(got), want) << "byte " << b;
  }
}

TEST(E4m3, EncodeRoundTripsAndTies) {
  // Every finite positive code round-trips; midpoints between neighbours go to the even code; one
  // ulp either side of a midpoint goes to the nearer code.
  for (int b = 0; b <= 0x7e; ++b) {
    const float v = e4m3_to_float(uint8_t(b));
    EXPECT_EQ(float_to_e4m3(v), b);
    EXPECT_EQ(float_to_e4m3(-v), b | 0x80);
    if (b == 0x7e) break;
    const float next = e4m3_to_float(uint8_t(b + 1));
    const float mid = float((double(v) + double(next)) / 2);  // exact: few significant bits
    const int even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(float_to_e4m3(mid), even) << "midpoint after " << b;
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 0.0f)), b) << "below midpoint after " << b;
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 1e9f)), b + 1) << "above midpoint after " << b;
  }
}

TEST(E4m3, SaturationNanAndTiny) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(463.99f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1e10f), 0x7e);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: tie to even 0
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(float_to_e4m3(1e-40f), 0x00);  // fp32 subnormal input
}

TEST(E4m3, RandomMatchesNearestSearch) {
  auto rng = make_rng(1);
  std::uniform_real_distribution<float> ex(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(ex(rng)) * ((i & 1) ? -1.0f : 1.0f);
    // Nearest by search over all codes, ties to even code.
    int best = -1;
    double best_d = INFINITY;
    for (int b = 0; b <= 0x7e; ++b) {
      const double d = std::fabs(std::fabs(double(x)) - e4m3_value(uint8_t(b)));
      if (d < best_d || (d == best_d && b % 2 == 0)) best = b, best_d = d;
    }
    if (std::fabs(x) > 448.0f) best = 0x7e;
    EXPECT_EQ(float_to_e4m3(x) & 0x7f, best) << "x = " << x;
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(Nvfp4, DequantAllCodesTimesAllScales) {
  // One row of 16 * 256 elements: block b uses scale byte b, element j of a block code j.
  const int64_t cols = 16 * 256;
  std::vector<uint8_t> packed(cols / 2), scales(256);
  for (int b = 0; b < 256; ++b) {
    scales[b] = uint8_t(b);
    for (int j = 0; j < 16; j += 2) packed[b * 8 + j / 2] = uint8_t(j | ((j + 1) << 4));
  }
  for (GlobalScale g : {GlobalScale::decode(0.375f), GlobalScale::encode(3.0f)}) {
    std::vector<float> out(cols, 12345.0f);
    ASSERT_OK(dequantize_nvfp4_cpu(1, cols, packed.data(), scales.data(), ScaleLayout::kLinear, g, out.data()));
    for (int b = 0; b < 256; ++b) {
      for (int j = 0; j < 16; ++j) {
        const double prod = e2m1_value(j) * e4m3_value(uint8_t(b));  // exact in fp32
        const double want = g.convention == GlobalScaleConvention::kDecode ? double(float(prod) * g.value)
                                                                          : double(float(prod) / g.value);
        const float got = out[b * 16 + j];
        if (std::isnan(prod)) EXPECT_TRUE(std::isnan(got));
        else EXPECT_EQ(double(got), want) << "scale " << b << " code " << j;
      }
    }
  }
}

// Builds blocks where the recipe's effective multiplier is exactly 1, so each element is rounded
// straight onto the e2m1 grid: puts every tie (and its neighbours) through the full quantizer.
TEST(Nvfp4, QuantizeTiesThroughBothRecipes) {
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::vector<float> x;
  for (float t : ties) {
    // Block: amax 6 (element 0), then ties and neighbours with both signs.
    float blk[16] = {6.0f, t, -t, std::nextafter(t, 0.0f), std::nextafter(t, 9.0f), -std::nextafter(t, 0.0f),
                     -std::nextafter(t, 9.0f), 0.0f, -0.0f, 0.1f, -0.1f, 3.0f, -6.0f, 5.9f, 1.0f, -1.0f};
    x.insert(x.end(), blk, blk + 16);
  }
  const int64_t rows = int64_t(x.size()) / 16;
  for (Nvfp4Recipe recipe : {Nvfp4Recipe::kKernel, Nvfp4Recipe::kModelopt}) {
    Nvfp4QuantizeParams p;
    p.rows = rows;
    p.cols = 16;
    p.recipe = recipe;
    // kernel: SF = gs * 6 * rcp(6) = 1 for gs = 1; modelopt: amax / (6 * s2) = 1 for s2 = 1.
    p.global_scale = recipe == Nvfp4Recipe::kKernel ? GlobalScale::encode(1.0f) : GlobalScale::decode(1.0f);
    std::vector<uint8_t> packed(rows * 8, 0xAA), scales(rows, 0xAA);
    ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, packed.data(), scales.data()));
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(scales[r], 0x38) << to_string(recipe);  // 1.0
      for (int j = 0; j < 16; ++j) {
        const uint8_t code = (j & 1) ? packed[r * 8 + j / 2] >> 4 : packed[r * 8 + j / 2] & 0xf;
        EXPECT_EQ(code, float_to_e2m1(x[r * 16 + j])) << to_string(recipe) << " x = " << x[r * 16 + j];
      }
    }
  }
}

TEST(Nvfp4, SpecialBlocks) {
  // zero block, NaN block, inf block, tiny block (scale underflows e4m3)
  std::vector<float> x(4 * 16, 0.0f);
  x[16 + 3] = NAN;
  x[16 + 4] = 1.0f;
  x[32 + 0] = INFINITY;
  x[32 + 1] = -2.0f;
  x[32 + 2] = 1.0f;
  for (int j = 0; j < 16; ++j) x[48 + j] = 1e-30f * (j + 1);
  for (Nvfp4Recipe recipe : {Nvfp4Recipe::kKernel, Nvfp4Recipe::kModelopt}) {
    Nvfp4QuantizeParams p;
    p.rows = 4;
    p.cols = 16;
    p.recipe = recipe;
    p.global_scale = GlobalScale::decode(1.0f / 2688.0f);
    std::vector<uint8_t> packed(32, 0xAA), scales(4, 0xAA);
    ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, packed.data(), scales.data()));
    // Zero block: kernel writes scale 0, modelopt 1.0; all codes +0.
    EXPECT_EQ(scales[0], recipe == Nvfp4Recipe::kKernel ? 0x00 : 0x38);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(packed[i], 0);
    // NaN block: NaN scale, zero codes -> dequantizes to NaN.
    EXPECT_EQ(scales[1], 0x7f);
    for (int i = 8; i < 16; ++i) EXPECT_EQ(packed[i], 0);
    // inf block: scale saturates to 448, inf -> +6, the rest to the grid of that scale.
    EXPECT_EQ(scales[2], 0x7e);
    EXPECT_EQ(packed[16] & 0xf, 0x7);
    // Tiny block: kernel recipe's scale rounds to 0 -> zero codes; ModelOpt's scale is clamped to 1.0.
    if (recipe == Nvfp4Recipe::kKernel) {
      EXPECT_EQ(scales[3], 0x00);
      for (int i = 24; i < 32; ++i) EXPECT_EQ(packed[i], 0);
    }
    std::vector<float> back(64);
    ASSERT_OK(dequantize_nvfp4_cpu(4, 16, packed.data(), scales.data(), ScaleLayout::kLinear, p.global_scale,
                                   back.data()));
    for (int j = 0; j < 16; ++j) EXPECT_TRUE(std::isnan(back[16 + j]));
    EXPECT_FLOAT_EQ(back[32], 1.0f);  // 6 * 448 * (1/2688)
  }
}

TEST(Nvfp4, RandomQuantizeErrorIsWithinHalfStep) {
  auto rng = make_rng(2);
  const int64_t rows = 64, cols = 512;
  auto x = testing::random_bf16(rng, rows * cols, -3.0f, 3.0f);
  for (Nvfp4Recipe recipe : {Nvfp4Recipe::kKernel, Nvfp4Recipe::kModelopt}) {
    Nvfp4QuantizeParams p;
    p.rows = rows;
    p.cols = cols;
    p.recipe = recipe;
    p.global_scale = GlobalScale::from_amax(3.0f, GlobalScaleConvention::kEncode);
    std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 16);
    ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kBF16, packed.data(), scales.data()));
    std::vector<float> back(rows * cols);
    ASSERT_OK(dequantize_nvfp4_cpu(rows, cols, packed.data(), scales.data(), ScaleLayout::kLinear, p.global_scale,
                                   back.data()));
    EXPECT_GT(testing::l2_norm(back), 0.0);
    // Checked here without the library's quantizer (block_codec.h), which the GPU codec, the
    // kernels and the reference share: each block's scale is amax / 6 in grid units rounded to
    // e4m3 (within half an e4m3 step, 1/16, plus the recipes' one-ulp differences), and each value's
    // code is a nearest e2m1 grid point to x over that scale, saturating at 6 (where two are equally
    // near, up to the kernel recipe's rcp.approx, either).
    static constexpr double kGrid[] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    int64_t nonzero_codes = 0;
    for (int64_t b = 0; b < rows * cols / 16; ++b) {
      double amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(double(bf16_to_float(x[b * 16 + j]))));
      const double want_scale = amax * p.global_scale.value / 6.0;
      EXPECT_NEAR(e4m3_value(scales[b]), want_scale, want_scale / 16 * 1.001 + 1e-12) << "block " << b;
      const double sf = e4m3_value(scales[b]) / p.global_scale.value;  // grid unit of this block
      ASSERT_GT(sf, 0.0) << "block " << b;
      for (int j = 0; j < 16; ++j) {
        const int64_t i = b * 16 + j;
        const double xi = bf16_to_float(x[i]), v = std::min(std::fabs(xi) / sf, 6.0);
        double nearest = 1e30;
        for (double g : kGrid) nearest = std::min(nearest, std::fabs(v - g));
        const double got = std::fabs(double(back[i])) / sf;
        EXPECT_LE(std::fabs(got - v), nearest + 1e-6 * std::max(1.0, v)) << "i = " << i << ": x/scale = " << v
                                                                          << ", decoded " << got;
        if (back[i] != 0.0f) {
          ++nonzero_codes;
          EXPECT_EQ(std::signbit(back[i]), std::signbit(xi)) << "i = " << i;
        }
      }
      if (::testing::Test::HasFailure()) break;
    }
    EXPECT_GT(nonzero_codes, rows * cols / 2);
  }
}

TEST(Nvfp4, ConventionsAgreeWhenScalesAreExactInverses) {
  // gs = 4 and s2 = 0.25 are exact inverses: both conventions give identical bytes for both recipes.
  auto rng = make_rng(3);
  auto x = testing::random_floats(rng, 32 * 64, -100.0f, 100.0f);
  for (Nvfp4Recipe recipe : {Nvfp4Recipe::kKernel, Nvfp4Recipe::kModelopt}) {
    std::vector<uint8_t> pa(32 * 32), sa(32 * 4), pb(32 * 32), sb(32 * 4);
    Nvfp4QuantizeParams p;
    p.rows = 32;
    p.cols = 64;
    p.recipe = recipe;
    p.global_scale = GlobalScale::encode(4.0f);
    ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, pa.data(), sa.data()));
    p.global_scale = GlobalScale::decode(0.25f);
    ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, pb.data(), sb.data()));
    EXPECT_EQ(pa, pb);
    EXPECT_EQ(sa, sb);
  }
}

TEST(Nvfp4, RejectsBadArguments) {
  std::vector<float> x(64);
  std::vector<uint8_t> packed(32), scales(4);
  Nvfp4QuantizeParams p;
  p.rows = 1;
  p.cols = 24;
  Status s = quantize_nvfp4_cpu(p, x.data(), InputType::kF32, packed.data(), scales.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cols = 24"), std::string::npos) << s.message();
  p.cols = 64;
  p.global_scale = GlobalScale::encode(0.0f);
  s = quantize_nvfp4_cpu(p, x.data(), InputType::kF32, packed.data(), scales.data());
  EXPECT_NE(s.message().find("global_scale = 0"), std::string::npos) << s.message();
  p.global_scale = GlobalScale::encode(NAN);
  EXPECT_EQ(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, packed.data(), scales.data()).code(),
            StatusCode::kInvalidArgument);
  p.global_scale = GlobalScale::encode(1.0f);
  EXPECT_EQ(quantize_nvfp4_cpu(p, nullptr, InputType::kF32, packed.data(), scales.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_nvfp4_cpu(1, 8, packed.data(), scales.data(), ScaleLayout::kLinear, p.global_scale,
                                 x.data()).code(),
            StatusCode::kInvalidArgument);
  // No rows: null pointers are fine, as on the GPU (format.h: the same contracts), and nothing is written.
  p.rows = 0;
  EXPECT_OK(quantize_nvfp4_cpu(p, nullptr, InputType::kF32, nullptr, nullptr));
  p.layout = ScaleLayout::kSwizzled128x4;
  EXPECT_OK(quantize_nvfp4_cpu(p, nullptr, InputType::kF32, nullptr, nullptr));
  EXPECT_OK(dequantize_nvfp4_cpu(0, 64, nullptr, nullptr, ScaleLayout::kLinear, p.global_scale, nullptr));
  EXPECT_OK(quantize_mxfp4_cpu(0, 64, nullptr, InputType::kF32, nullptr, nullptr));
  EXPECT_OK(dequantize_mxfp4_cpu(0, 64, nullptr, nullptr, nullptr));
  EXPECT_EQ(dequantize_mxfp4_cpu(1, 64, nullptr, scales.data(), x.data()).code(), StatusCode::kInvalidArgument);
  Nvfp4Recipe r;
  s = parse_recipe("fast", &r);
  EXPECT_NE(s.message().find("'fast'"), std::string::npos);
}

TEST(ScaleLayout, SwizzleMatchesBriefFormulaAndRoundTrips) {
  auto rng = make_rng(4);
  for (auto [rows, ksf] : {std::pair<int64_t, int64_t>{1, 1}, {127, 3}, {128, 4}, {300, 7}, {7168, 448}}) {
    const size_t bytes = scale_bytes(ScaleLayout::kSwizzled128x4, rows, ksf);
    EXPECT_EQ(bytes, size_t((rows + 127) / 128 * 128 * ((ksf + 3) / 4 * 4)));
    std::set<int64_t> seen;
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t k = 0; k < ksf; ++k) {
        const int64_t pk = (ksf + 3) / 4 * 4;
        const int64_t brief = ((m / 128) * (pk / 4) + k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + k % 4;
        const int64_t off = swizzled_scale_offset(m, k, ksf);
        ASSERT_EQ(off, brief);
        ASSERT_LT(size_t(off), bytes);
        ASSERT_TRUE(seen.insert(off).second) << "offset collision at " << m << "," << k;
      }
    }
    std::vector<uint8_t> lin(rows * ksf), swz(bytes, 0xAA), back(rows * ksf, 0);
    for (auto& b : lin) b = uint8_t(rng());
    ASSERT_OK(swizzle_scales_cpu(rows, ksf, lin.data(), swz.data()));
    ASSERT_OK(unswizzle_scales_cpu(rows, ksf, swz.data(), back.data()));
    EXPECT_EQ(lin, back);
    // Padding is zeroed.
    size_t nonzero_pad = 0;
    for (size_t i = 0; i < bytes; ++i)
      if (!seen.count(int64_t(i)) && swz[i] != 0) ++nonzero_pad;
    EXPECT_EQ(nonzero_pad, 0u);
  }
}

TEST(ScaleLayout, SwizzledQuantizeEqualsLinearThenSwizzle) {
  auto rng = make_rng(5);
  const int64_t rows = 200, cols = 96;
  auto x = testing::random_floats(rng, rows * cols, -4.0f, 4.0f);
  Nvfp4QuantizeParams p;
  p.rows = rows;
  p.cols = cols;
  p.global_scale = GlobalScale::encode(500.0f);
  std::vector<uint8_t> pl(rows * cols / 2), sl(rows * cols / 16), ps(rows * cols / 2);
  std::vector<uint8_t> ss(scale_bytes(ScaleLayout::kSwizzled128x4, rows, cols / 16)), ss2(ss.size());
  ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, pl.data(), sl.data()));
  p.layout = ScaleLayout::kSwizzled128x4;
  ASSERT_OK(quantize_nvfp4_cpu(p, x.data(), InputType::kF32, ps.data(), ss.data()));
  ASSERT_OK(swizzle_scales_cpu(rows, cols / 16, sl.data(), ss2.data()));
  EXPECT_EQ(pl, ps);
  EXPECT_EQ(ss, ss2);
  std::vector<float> a(rows * cols), b(rows * cols);
  ASSERT_OK(dequantize_nvfp4_cpu(rows, cols, pl.data(), sl.data(), ScaleLayout::kLinear, p.global_scale, a.data()));
  ASSERT_OK(dequantize_nvfp4_cpu(rows, cols, ps.data(), ss.data(), p.layout, p.global_scale, b.data()));
  EXPECT_EQ(a, b);
}

TEST(Mxfp4, DequantAllCodesTimesAllScales) {
  const int64_t cols = 32 * 256;
  std::vector<uint8_t> packed(cols / 2), scales(256);
  for (int b = 0; b < 256; ++b) {
    scales[b] = uint8_t(b);
    for (int j = 0; j < 32; j += 2) packed[b * 16 + j / 2] = uint8_t((j % 16) | (((j + 1) % 16) << 4));
  }
  std::vector<float> out(cols);
  ASSERT_OK(dequantize_mxfp4_cpu(1, cols, packed.data(), scales.data(), out.data()));
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 32; ++j) {
      const float got = out[b * 32 + j];
      if (b == 255) {
        EXPECT_TRUE(std::isnan(got));
        continue;
      }
      const double want = e2m1_value(j % 16) * std::ldexp(1.0, b - 127);
      EXPECT_EQ(double(got), double(float(want))) << "scale " << b << " code " << j % 16;
    }
  }
}

TEST(Mxfp4, QuantizeRules) {
  std::vector<float> x(4 * 32, 0.0f);
  for (int j = 0; j < 32; ++j) x[32 + j] = (j - 16) * 0.25f;  // amax 4 -> scale 2^0, values exact halves
  x[64] = 7.5f;                                               // amax 7.5: scale 2^0, 7.5 saturates to 6
  x[65] = 5.0f;
  x[96 + 7] = NAN;
  std::vector<uint8_t> packed(64, 0xAA), scales(4, 0xAA);
  ASSERT_OK(quantize_mxfp4_cpu(4, 32, x.data(), InputType::kF32, packed.data(), scales.data()));
  EXPECT_EQ(scales[0], 127);  // zero block
  EXPECT_EQ(scales[1], 127);
  EXPECT_EQ(scales[2], 127);
  EXPECT_EQ(packed[32] & 0xf, 0x7);
  EXPECT_EQ(packed[32] >> 4, 0x6);  // 5.0 is a tie between 4 and 6: even mantissa -> 4
  EXPECT_EQ(scales[3], 0xff);
  std::vector<float> back(128);
  ASSERT_OK(dequantize_mxfp4_cpu(4, 32, packed.data(), scales.data(), back.data()));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(back[32 + j], e2m1_to_float(float_to_e2m1((j - 16) * 0.25f)));
  for (int j = 0; j < 32; ++j) EXPECT_TRUE(std::isnan(back[96 + j]));
  EXPECT_EQ(quantize_mxfp4_cpu(1, 16, x.data(), InputType::kF32, packed.data(), scales.data()).code(),
            StatusCode::kInvalidArgument);
}

TEST(RcpApprox, HostEmulationSpecialValues) {
  EXPECT_TRUE(std::isinf(rcp_approx_ftz_host(0.0f)) && rcp_approx_ftz_host(0.0f) > 0);
  EXPECT_TRUE(std::isinf(rcp_approx_ftz_host(-0.0f)) && rcp_approx_ftz_host(-0.0f) < 0);
  EXPECT_TRUE(std::isinf(rcp_approx_ftz_host(1e-40f)));  // subnormal input is flushed
  EXPECT_EQ(rcp_approx_ftz_host(INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(rcp_approx_ftz_host(NAN)));
  EXPECT_EQ(rcp_approx_ftz_host(std::ldexp(1.0f, 127)), 0.0f);  // 2^-127 is subnormal: flushed
  for (int e = -126; e <= 126; ++e) EXPECT_EQ(rcp_approx_ftz_host(std::ldexp(1.0f, e)), std::ldexp(1.0f, -e));
  auto rng = make_rng(6);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::ldexp(1.0f + float(rng() % 8388608) / 8388608.0f, int(rng() % 200) - 100);
    const float r = rcp_approx_ftz_host(x);
    EXPECT_NEAR(double(r) * double(x), 1.0, 2.5e-7) << x;  // within ~2 ulp
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace fp4moe
