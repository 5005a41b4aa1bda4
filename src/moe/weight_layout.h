// The repacked ("unit-tiled") weight layout the CUDA kernels read, shared by the repack kernels, the
// SIMT reference kernels and the sm90 wgmma kernels. One definition, host and device.
//
// A weight matrix W_e [M rows, K] is cut into units of 64 rows x 64 K elements. Unit (e, mu, ku) is
// 2304 contiguous bytes at e * expert_bytes + (mu * k_units + ku) * 2304:
//   - 2048 bytes of codes, in the register-fragment order of a warpgroup's wgmma A operand: thread t
//     of the warpgroup owns 16 bytes at t * 16, one 32-bit word per k16 step j (0..3). Thread t is
//     warp w = t/32, lane l = t%32; it holds rows r0 = 16w + l/4 and r1 = r0 + 8, and k columns
//     c0 = 16j + 2(l%4) + {0,1} and c0 + 8 + {0,1}. The word's 8 values are the four bf16x2 A
//     registers q = 0..3 = (r0, c0), (r1, c0), (r0, c0+8), (r1, c0+8), each a (lo, hi) pair.
//     Register q is built by rotating the word left and masking: its value's e2m1 magnitude bits
//     m0..m2 must land on bf16 bits 6..8 (exponent low bits and mantissa top bit) and its sign on
//     bit 15 (+16 for the hi value), which gives code * 2^-126 exactly (including 0.5, a bf16
//     subnormal); one bf16x2 multiply by the block's prescaled scale then yields code * scale * 2^-7.
//     The bit placement (kFragmentRotation, fragment_bit) is chosen so that the whole word decodes
//     with 4 rotations and 5 masks: registers 0, 1, 2 each come from one rotation (0, 10, 4) and one
//     AND, register 3 from two (m0, m1 and the sign by 6, m2 by 14). No placement does it with fewer
//     (four single-rotation registers cannot tile the 32 bits).
//   - 256 bytes of scales, [64 rows][4 blocks of 16], one byte per (row, k16 block): the e4m3 byte
//     (NVFP4) or the e8m0 byte of the 32-block (MXFP4, duplicated). kWeightPrescaleLog2 = 7 is folded
//     into the epilogue's alpha.
// Rows and K beyond the matrix are zero codes with scale byte 0.
//
// GEMM1 (w13, M = 2I) interleaves gate and up rows so that one thread's rows r0 and r1 are the gate
// and up rows of the same intermediate index: unit row u = 16g + s of unit mu is intermediate index
// i = 32*mu + 8g + s%8, gate (linear row i) for s < 8 and up (linear row I + i) for s >= 8. A unit of
// GEMM1 therefore produces 32 intermediate values. GEMM2 (w2, M = H) keeps the row order.
#pragma once

#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::layout {

constexpr int kUnitRows = 64;
constexpr int kUnitK = 64;
constexpr int kUnitCodeBytes = kUnitRows * kUnitK / 2;   // 2048
constexpr int kUnitScaleBytes = kUnitRows * kUnitK / 16; // 256
constexpr int kUnitBytes = kUnitCodeBytes + kUnitScaleBytes;
constexpr int kWeightPrescaleLog2 = 7;
constexpr int kIntermediatePerUnit = kUnitRows / 2;      // GEMM1: 32 intermediate values per unit

FP4MOE_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct GemmWeightShape {
  int64_t rows = 0;  // M, unpadded
  int64_t k = 0;     // K, unpadded
  bool gate_up_interleave = false;
  FP4MOE_HD int64_t m_units() const { return round_up(rows, kUnitRows) / kUnitRows; }
  FP4MOE_HD int64_t k_units() const { return round_up(k, kUnitK) / kUnitK; }
  FP4MOE_HD int64_t expert_bytes() const { return m_units() * k_units() * kUnitBytes; }
  FP4MOE_HD int64_t unit_offset(int64_t expert, int64_t mu, int64_t ku) const {
    return expert * expert_bytes() + (mu * k_units() + ku) * kUnitBytes;
  }
  // Linear source row of unit row `ur` of unit `mu` (-1: padding).
  FP4MOE_HD int64_t source_row(int64_t mu, int ur) const {
    int64_t row;
    if (gate_up_interleave) {
      const int64_t inter = rows / 2;
      const int64_t i = mu * kIntermediatePerUnit + (ur / 16) * 8 + (ur % 8);
      row = (ur % 16) < 8 ? i : inter + i;
      return i < inter ? row : -1;
    }
    row = mu * kUnitRows + ur;
    return row < rows ? row : -1;
  }
};

// Where value (q, half) of word j of thread t sits: unit row and k column inside the unit.
struct FragmentCoord {
  int row;
  int col;
};
FP4MOE_HD FragmentCoord fragment_coord(int thread, int j, int q, int half) {
  const int w = thread / 32, l = thread % 32;
  const int row = 16 * w + l / 4 + ((q & 1) ? 8 : 0);
  const int col = 16 * j + 2 * (l % 4) + ((q & 2) ? 8 : 0) + half;
  return {row, col};
}

// Inverse: (unit row, col) -> (thread, j, q, half).
struct FragmentSlot {
  int thread, j, q, half;
};
FP4MOE_HD FragmentSlot fragment_slot(int row, int col) {
  const int w = row / 16, rr = row % 16;
  const int j = col / 16, cc = col % 16;
  const int lane = (rr % 8) * 4 + (cc % 8) / 2;
  const int q = (rr >= 8 ? 1 : 0) | (cc >= 8 ? 2 : 0);
  return {w * 32 + lane, j, q, cc % 2};
}

// Rotation (left) that brings bit b (0..2: magnitude m0..m2, 3: sign) of register q's values to
// its bf16 position, and the position of that bit in the word.
FP4MOE_HD int fragment_rotation(int q, int b) {
  return q == 0 ? 0 : q == 1 ? 10 : q == 2 ? 4 : (b == 2 ? 14 : 6);
}
FP4MOE_HD int fragment_bit(int q, int half, int b) {
  const int target = 16 * half + (b < 3 ? 6 + b : 15);
  return (target - fragment_rotation(q, b) + 32) % 32;
}
FP4MOE_HD uint32_t pack_code(uint32_t word, int q, int half, uint8_t code) {
  for (int b = 0; b < 4; ++b) word |= uint32_t((code >> b) & 1) << fragment_bit(q, half, b);
  return word;
}
FP4MOE_HD uint8_t unpack_code(uint32_t word, int q, int half) {
  uint8_t code = 0;
  for (int b = 0; b < 4; ++b) code |= uint8_t(((word >> fragment_bit(q, half, b)) & 1) << b);
  return code;
}

FP4MOE_HD uint32_t rotl32(uint32_t w, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(w, w, r);
#else
  return r == 0 ? w : (w << r) | (w >> (32 - r));
#endif
}

// Register q of a word, before the scale: bf16x2 whose halves are the e2m1 codes * 2^-126 (see the
// header comment). The kernels' decode; the tests check it against unpack_code for every bit.
FP4MOE_HD uint32_t fragment_bits(uint32_t w, int q) {
  constexpr uint32_t kMagSign = 0x81C081C0u;
  switch (q) {
    case 0: return w & kMagSign;
    case 1: return rotl32(w, 10) & kMagSign;
    case 2: return rotl32(w, 4) & kMagSign;
    default: return (rotl32(w, 6) & 0x80C080C0u) | (rotl32(w, 14) & 0x01000100u);
  }
}

// Reads one code / scale byte of a repacked matrix (slow path: the SIMT kernels and tests).
FP4MOE_HD uint8_t load_code(const uint8_t* base, const GemmWeightShape& s, int64_t expert, int64_t mu, int ur,
                            int64_t k) {
  const int64_t ku = k / kUnitK;
  const FragmentSlot f = fragment_slot(ur, int(k % kUnitK));
  const uint8_t* unit = base + s.unit_offset(expert, mu, ku);
  uint32_t word;
  const uint8_t* p = unit + f.thread * 16 + f.j * 4;
  word = uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
  return unpack_code(word, f.q, f.half);
}
FP4MOE_HD uint8_t load_scale(const uint8_t* base, const GemmWeightShape& s, int64_t expert, int64_t mu, int ur,
                             int64_t k) {
  const uint8_t* unit = base + s.unit_offset(expert, mu, k / kUnitK);
  return unit[kUnitCodeBytes + ur * 4 + int(k % kUnitK) / 16];
}

// The prescaled scale a scale byte stands for: scale * 2^(126 - kWeightPrescaleLog2), exact in bf16
// for every e4m3 byte and for e8m0 bytes in [kMinE8m0, kMaxE8m0].
constexpr int kMinE8m0 = kWeightPrescaleLog2 - 5;     // smallest product still exact in bf16
constexpr int kMaxE8m0 = 128 + kWeightPrescaleLog2;  // largest prescaled scale below bf16's max
FP4MOE_HD float prescaled_scale(uint8_t byte, bool mxfp4) {
  const float two_pow = bits_float(uint32_t(127 + 126 - kWeightPrescaleLog2) << 23);  // 2^119
  if (mxfp4) {
    // 2^(byte-127) * 2^(126-7) = 2^(byte-8): fp32 exponent field byte + 119.
    if (byte == 0xff) return bits_float(0x7fc00000u);
    return bits_float(uint32_t(byte + 126 - kWeightPrescaleLog2) << 23);
  }
  return e4m3_to_float(byte) * two_pow;
}

}  // namespace fp4moe::layout
