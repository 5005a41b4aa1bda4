// The unit-tiled weight layout: fragment mapping is a bijection, pack/unpack round-trip, the register
// decode of the sm90 kernels (bit placement + one bf16 multiply) gives code * scale * 2^-7 exactly
// for every code and every scale byte, and the GEMM1 gate/up interleave pairs the right rows.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include "fp4moe/numerics.h"
#include "src/moe/weight_layout.h"
#include "src/moe/workspace.h"
#include "test_util.h"

namespace fp4moe {
namespace {

using namespace layout;

TEST(WeightLayout, FragmentMappingIsABijection) {
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < 128; ++t)
    for (int j = 0; j < 4; ++j)
      for (int q = 0; q < 4; ++q)
        for (int h = 0; h < 2; ++h) {
          const FragmentCoord c = fragment_coord(t, j, q, h);
          ASSERT_TRUE(c.row >= 0 && c.row < 64 && c.col >= 0 && c.col < 64);
          ASSERT_TRUE(seen.insert({c.row, c.col}).second);
          const FragmentSlot s = fragment_slot(c.row, c.col);
          ASSERT_EQ(s.thread, t);
          ASSERT_EQ(s.j, j);
          ASSERT_EQ(s.q, q);
          ASSERT_EQ(s.half, h);
        }
  EXPECT_EQ(seen.size(), 64u * 64u);
}

TEST(WeightLayout, PackUnpackRoundTrips) {
  auto rng = testing::make_rng(31);
  for (int it = 0; it < 10000; ++it) {
    uint8_t codes[4][2];
    uint32_t w = 0;
    for (int q = 0; q < 4; ++q)
      for (int h = 0; h < 2; ++h) {
        codes[q][h] = uint8_t(rng() & 15);
        w = pack_code(w, q, h, codes[q][h]);
      }
    for (int q = 0; q < 4; ++q)
      for (int h = 0; h < 2; ++h) ASSERT_EQ(unpack_code(w, q, h), codes[q][h]);
  }
}

// Software bf16 multiply, round to nearest even, subnormals kept (what fma.rn.bf16x2 with a -0
// addend does): exact here because both factors have few significant bits.
uint16_t bf16_mul(uint16_t a, uint16_t b) {
  const double p = double(bf16_to_float(a)) * double(bf16_to_float(b));
  return float_to_bf16(float(p));  // p is exactly representable in bf16 in every case tested
}

// The kernels' decode (fragment_bits) of a word holding 8 random codes: every register shows exactly
// its two codes as bf16 bit patterns (magnitude on bits 6..8, sign on 15; +16 for the hi value), no
// bit of another register leaking in, over every placement of every code.
TEST(WeightLayout, FragmentBitsOfFullWordsAreTheCodesAlone) {
  auto rng = testing::make_rng(37);
  auto bf16_bits_of = [](uint8_t code) { return uint32_t(code & 7) << 6 | uint32_t(code >> 3) << 15; };
  for (int it = 0; it < 20000; ++it) {
    const uint32_t w = uint32_t(rng());
    for (int q = 0; q < 4; ++q) {
      const uint32_t want = bf16_bits_of(unpack_code(w, q, 0)) | bf16_bits_of(unpack_code(w, q, 1)) << 16;
      ASSERT_EQ(fragment_bits(w, q), want) << "word " << std::hex << w << " register " << q;
    }
  }
  // Each of the 32 bits belongs to exactly one (register, half, bit).
  uint32_t seen = 0;
  for (int q = 0; q < 4; ++q)
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 4; ++b) {
        const uint32_t bit = uint32_t(1) << fragment_bit(q, h, b);
        EXPECT_FALSE(seen & bit) << "bit " << fragment_bit(q, h, b) << " used twice";
        seen |= bit;
      }
  EXPECT_EQ(seen, 0xffffffffu);
}

// Every checkpoint scale byte (e4m3: all 256, zero, negative and NaN included; e8m0: the accepted
// range and NaN) through the repack (scale code, code transform) and the kernels' decode (scale pair
// from the thread's scale bytes, bit placement, one bf16 multiply per register) gives exactly
// code * scale * 2^-7 for every code, NaN for a NaN scale.
TEST(WeightLayout, RegisterDecodeIsExactForAllCodesAndScales) {
  for (bool mx : {false, true}) {
    const ScaleCodec codec = scale_codec(mx);
    for (int sb = 0; sb < 256; ++sb) {
      if (mx && sb != 0xff && (sb < kMinE8m0 || sb > kMaxE8m0)) continue;  // rejected by upload_weights
      const RepackedScale rs = repack_scale(uint8_t(sb), mx);
      const double scale = mx ? double(e8m0_to_float(uint8_t(sb))) : double(e4m3_to_float(uint8_t(sb)));
      ASSERT_TRUE(std::isnan(scale) || double(scale_of_code(rs.code, mx)) == std::fabs(scale) || scale == 0.0)
          << "scale byte " << sb;
      // another valid code in the thread's other bytes: the smallest, a middle one, the largest (+Inf)
      const std::array<int, 3> others =
          mx ? std::array<int, 3>{kMinE8m0, 127, 136} : std::array<int, 3>{0, 24, 144};
      for (int other : others) {
        for (int j = 0; j < 4; ++j) {
          for (int row = 0; row < 2; ++row) {  // this scale as row r0's (registers 0, 2) or r1's (1, 3)
            uint8_t bytes[8];
            for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(other);
            bytes[2 * j + row] = rs.code;
            uint32_t words[2];
            std::memcpy(words, bytes, 8);
            const uint32_t pair = scale_pair_bits(words[j / 2], j, codec);
            const uint16_t S = uint16_t(row ? pair >> 16 : pair & 0xffff);
            ASSERT_EQ(uint16_t(row ? pair & 0xffff : pair >> 16), uint16_t(other * codec.mul + codec.bias))
                << "the other row's scale of step " << j;
            for (int code = 0; code < 16; ++code) {
              const uint8_t stored = rs.zero_codes ? 0 : uint8_t(code ^ rs.code_xor);
              for (int q = row; q < 4; q += 2) {
                const uint32_t w = pack_code(pack_code(0, q, 0, stored), q, 1, stored);
                const uint32_t r = fragment_bits(w, q);
                const uint16_t lo = bf16_mul(uint16_t(r & 0xffff), S), hi = bf16_mul(uint16_t(r >> 16), S);
                const double want = double(e2m1_to_float(uint8_t(code))) * scale / 128.0;
                if (std::isnan(scale)) {
                  ASSERT_TRUE(std::isnan(bf16_to_float(lo)) && std::isnan(bf16_to_float(hi))) << sb;
                } else {
                  ASSERT_EQ(double(bf16_to_float(lo)), want) << "q " << q << " code " << code << " scale byte " << sb;
                  ASSERT_EQ(double(bf16_to_float(hi)), want) << "q " << q << " code " << code << " scale byte " << sb;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The scale codes of a unit: a bijection of (row, block) onto its 256 bytes, and thread t's 8 bytes at
// (t / 4) * 8 are its rows r0 / r1 (fragment_coord's q = 0 / 1) at 2 j / 2 j + 1, as the kernel reads them.
TEST(WeightLayout, ScaleCodesOfAThreadAreItsRowsPairs) {
  std::set<int> seen;
  for (int ur = 0; ur < 64; ++ur)
    for (int blk = 0; blk < 4; ++blk) {
      const int off = scale_code_offset(ur, blk);
      ASSERT_TRUE(off >= 0 && off < kUnitScaleBytes);
      ASSERT_TRUE(seen.insert(off).second);
    }
  for (int t = 0; t < 128; ++t)
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(scale_code_offset(fragment_coord(t, j, 0, 0).row, j), (t / 4) * 8 + 2 * j);
      EXPECT_EQ(scale_code_offset(fragment_coord(t, j, 1, 0).row, j), (t / 4) * 8 + 2 * j + 1);
      EXPECT_EQ(fragment_coord(t, j, 0, 0).col / 16, j);  // step j is k16 block j of the unit
    }
}

// Units tile each expert's bytes exactly once, and the units an m-block of 2 or 4 consumers decodes
// for one K chunk are contiguous (the sm90 producer fetches them with one copy), for every m_units.
TEST(WeightLayout, UnitGroupsTileTheExpertAndKeepAChunkContiguous) {
  for (int64_t m_units = 1; m_units <= 9; ++m_units)
    for (int64_t k_units : {1, 3}) {
      const GemmWeightShape s{m_units * kUnitRows, k_units * kUnitK, false};
      std::set<int64_t> seen;
      for (int64_t e = 0; e < 2; ++e)
        for (int64_t mu = 0; mu < m_units; ++mu)
          for (int64_t ku = 0; ku < k_units; ++ku) {
            const int64_t off = s.unit_offset(e, mu, ku);
            ASSERT_EQ(off % kUnitBytes, 0);
            ASSERT_TRUE(off >= 0 && off < 2 * s.expert_bytes());
            ASSERT_TRUE(seen.insert(off).second) << "m_units " << m_units << " mu " << mu << " ku " << ku;
          }
      EXPECT_EQ(int64_t(seen.size()), 2 * m_units * k_units);
      for (int consumers : {2, 4})
        for (int64_t mb = 0; mb * consumers < m_units; ++mb)
          for (int64_t ku = 0; ku < k_units; ++ku)
            for (int c = 1; c < consumers && mb * consumers + c < m_units; ++c)
              ASSERT_EQ(s.unit_offset(1, mb * consumers + c, ku), s.unit_offset(1, mb * consumers, ku) + c * kUnitBytes);
    }
}

TEST(WeightLayout, Gemm1InterleavePairsGateAndUpRows) {
  GemmWeightShape s{2 * 96, 128, true};  // I = 96: 3 units
  EXPECT_EQ(s.m_units(), 3);
  for (int mu = 0; mu < 3; ++mu)
    for (int ur = 0; ur < 64; ++ur) {
      if (ur % 16 >= 8) continue;
      const int64_t gate = s.source_row(mu, ur), up = s.source_row(mu, ur + 8);
      ASSERT_GE(gate, 0);
      EXPECT_LT(gate, 96);
      EXPECT_EQ(up, gate + 96);  // the same intermediate index
      EXPECT_EQ(gate, mu * 32 + (ur / 16) * 8 + ur % 8);
    }
  GemmWeightShape d{100, 64, false};  // 100 rows: the second unit is partly padding
  EXPECT_EQ(d.source_row(1, 35), 99);
  EXPECT_EQ(d.source_row(1, 36), -1);
}

TEST(Workspace, TiledOffsetsAreA128ByteSwizzle) {
  const int64_t rows_cap = 64;
  std::set<int64_t> seen;
  for (int64_t r = 0; r < rows_cap; ++r)
    for (int64_t k = 0; k < 128; k += 8) {
      const int64_t off = tiled_offset_bytes(r, k, rows_cap);
      EXPECT_TRUE(seen.insert(off).second);
      EXPECT_EQ(off % 16, 0);
      // Within an 8-row atom the 16-byte piece index is XORed with the row.
      EXPECT_EQ((off / 16) % 8, ((k % 64) / 8) ^ (r % 8));
      EXPECT_EQ(off / 128, (k / 64) * rows_cap + r);
    }
}

}  // namespace
}  // namespace fp4moe
