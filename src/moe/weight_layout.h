// The repacked ("unit-tiled") weight layout the CUDA kernels read, shared by the repack kernels, the
// SIMT reference kernels and the sm90 wgmma kernels. One definition, host and device.
//
// A weight matrix W_e [M rows, K] is cut into units of 64 rows x 64 K elements, 2304 bytes each. Units
// are grouped by 4 consecutive mu (kUnitGroup; the last group of a matrix may hold fewer): a group
// stores its units ku-major, so the 2 or 4 units that the consumer warpgroups of one CTA decode for
// one K chunk are contiguous and arrive with a single bulk copy. Unit (e, mu, ku), in group g = mu / 4
// of size gs, is at e * expert_bytes + (4 g * k_units + ku * gs + mu % 4) * 2304 (unit_offset):
//   - 2048 bytes of codes, in the register-fragment order of a warpgroup's wgmma A operand: thread t
//     of the warpgroup owns 16 bytes at t * 16, one 32-bit word per k16 step j (0..3). Thread t is
//     warp w = t/32, lane l = t%32; it holds rows r0 = 16w + l/4 and r1 = r0 + 8, and k columns
//     c0 = 16j + 2(l%4) + {0,1} and c0 + 8 + {0,1}. The word's 8 values are the four bf16x2 A
//     registers q = 0..3 = (r0, c0), (r1, c0), (r0, c0+8), (r1, c0+8), each a (lo, hi) pair.
//     Register q is built by rotating the word left and masking: its value's e2m1 magnitude bits
//     m0..m2 must land on bf16 bits 6..8 (exponent low bits and mantissa top bit) and its sign on
//     bit 15 (+16 for the hi value), which gives code * 2^-126 exactly (including 0.5, a bf16
//     subnormal); one bf16x2 multiply by the block's prescaled scale then yields code * scale * 2^-7.
//     The bit placement (fragment_rotation, fragment_bit) is chosen so that the whole word decodes
//     with 4 shifts and 5 masks: registers 0, 1, 2 each come from one left rotation (0, 10, 4) and
//     one AND, register 3 from two shifts (m0, m1 and the sign left by 6, m2 right by 2). No
//     placement does it with fewer (four single-rotation registers cannot tile the 32 bits), and
//     only register 1's rotation brings a masked bit around the word's end. fragment_bits writes
//     the others as plain shifts, which ptxas issues partly as integer multiplies on the FMA pipe,
//     spreading the decode's integer work over the ALU and FMA pipes (session 14, -1 to -3% in the
//     layer; docs/perf-notes.md). Until then register 3's m2 bits took a rotation by 14 (bits 10 and
//     26 of the word were swapped), and the non-wrapping rotations were funnel shifts on the ALU.
//   - 256 bytes of scale codes, one byte per (row, k16 block), in pairs: thread t's rows r0 and r1
//     are the 8 bytes at (t / 4) * 8, ordered (r0 block 0, r1 block 0, r0 block 1, r1 block 1, ...),
//     so one 8-byte load gives a thread all its scales, and one byte permute plus one integer
//     multiply-add turns the pair of k16 step j into a bf16x2 of prescaled scales {S(r0), S(r1)}
//     (ScaleCodec below); the multiplies of registers q pick their row's half (.H0_H0 / .H1_H1).
//     kWeightPrescaleLog2 = 7 is folded into the epilogue's alpha.
// Rows and K beyond the matrix are zero codes with scale code 0.
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
constexpr int kUnitGroup = 4;                            // units of consecutive mu stored ku-major

FP4MOE_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct GemmWeightShape {
  int64_t rows = 0;  // M, unpadded
  int64_t k = 0;     // K, unpadded
  bool gate_up_interleave = false;
  FP4MOE_HD int64_t m_units() const { return round_up(rows, kUnitRows) / kUnitRows; }
  FP4MOE_HD int64_t k_units() const { return round_up(k, kUnitK) / kUnitK; }
  FP4MOE_HD int64_t expert_bytes() const { return m_units() * k_units() * kUnitBytes; }
  FP4MOE_HD int64_t unit_offset(int64_t expert, int64_t mu, int64_t ku) const {
    const int64_t g0 = mu / kUnitGroup * kUnitGroup;  // first unit of mu's group
    const int64_t gs = m_units() - g0 < kUnitGroup ? m_units() - g0 : kUnitGroup;
    return expert * expert_bytes() + (g0 * k_units() + ku * gs + mu % kUnitGroup) * kUnitBytes;
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
// its bf16 position, and the position of that bit in the word (30: the right shift by 2).
FP4MOE_HD int fragment_rotation(int q, int b) {
  return q == 0 ? 0 : q == 1 ? 10 : q == 2 ? 4 : (b == 2 ? 30 : 6);
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
    case 2: return (w << 4) & kMagSign;  // no masked bit wraps: a shift (or a multiply)
    default: return ((w << 6) & 0x80C080C0u) | ((w >> 2) & 0x01000100u);
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
// Byte offset of the scale code of (unit row ur, k16 block blk) inside a unit's scale bytes.
FP4MOE_HD int scale_code_offset(int ur, int blk) {
  const int pair = (ur / 16) * 8 + ur % 8, half = (ur % 16) / 8;
  return pair * 8 + blk * 2 + half;
}
FP4MOE_HD uint8_t load_scale_code(const uint8_t* base, const GemmWeightShape& s, int64_t expert, int64_t mu, int ur,
                                  int64_t k) {
  const uint8_t* unit = base + s.unit_offset(expert, mu, k / kUnitK);
  return unit[kUnitCodeBytes + scale_code_offset(ur, int(k % kUnitK) / 16)];
}

// The e8m0 scale bytes (MXFP4) whose products with e2m1 codes, prescaled, are exact bf16 numbers.
constexpr int kMinE8m0 = kWeightPrescaleLog2 - 5;     // smallest product still exact in bf16
constexpr int kMaxE8m0 = 128 + kWeightPrescaleLog2;  // largest prescaled scale below bf16's max

// Scale codes. A block scale is stored as a code c whose prescaled scale, scale * 2^(126 - 7), has the
// bf16 bits c * mul + bias: the kernels decode two codes at once with one integer multiply-add on a
// word holding them in its two 16-bit halves (c * mul + bias <= 0x7f80, +Inf, for every code made
// here: no carry into the sign bit or the other half).
//   NVFP4: c = ((E + 9) << 3) | m for a positive e4m3 scale 2^E (1 + m / 8), E in [-9, 8] (subnormal
//          e4m3 scales are normal numbers here); mul 16, bias 237 << 7: bf16 exponent E + 246.
//   MXFP4: c = the e8m0 byte b in [kMinE8m0, kMaxE8m0]; mul 128, bias 119 << 7: 2^(b - 8).
// Scales that are not positive numbers are folded into the block's codes when repacking (exact: the
// products code * scale do not change): a zero scale zeroes the codes (then any c works: 0); a
// negative one flips the codes' signs and stores |scale|; a NaN zeroes the codes and stores the code
// of +Inf (inf_scale_code), so that every product is 0 * Inf = NaN, as code * NaN is.
struct ScaleCodec {
  uint32_t mul, bias;
};
FP4MOE_HD ScaleCodec scale_codec(bool mxfp4) {
  return mxfp4 ? ScaleCodec{128u, 119u << 7} : ScaleCodec{16u, 237u << 7};
}
FP4MOE_HD uint8_t inf_scale_code(bool mxfp4) { return mxfp4 ? uint8_t(136) : uint8_t(18 << 3); }
FP4MOE_HD uint16_t prescaled_scale_bits(uint8_t c, bool mxfp4) {
  const ScaleCodec k = scale_codec(mxfp4);
  return uint16_t(c * k.mul + k.bias);
}

// How a checkpoint's scale byte (e4m3 or e8m0) is repacked: its code and what happens to its codes.
struct RepackedScale {
  uint8_t code = 0;
  uint8_t code_xor = 0;     // xor-ed into every e2m1 code of the block (8: flip the sign)
  bool zero_codes = false;  // the block's codes become 0
};
FP4MOE_HD RepackedScale repack_scale(uint8_t byte, bool mxfp4) {
  RepackedScale r;
  if (mxfp4) {
    if (byte == 0xff) {
      r.code = inf_scale_code(true);
      r.zero_codes = true;
    } else {
      r.code = byte;  // in [kMinE8m0, kMaxE8m0]: upload_weights rejects the rest
    }
    return r;
  }
  const uint8_t mag = byte & 0x7f;
  if (mag == 0x7f) {  // NaN
    r.code = inf_scale_code(false);
    r.zero_codes = true;
    return r;
  }
  if (mag == 0) {
    r.zero_codes = true;
    return r;
  }
  if (byte & 0x80) r.code_xor = 8;
  const int f = mag >> 3, m = mag & 7;
  if (f > 0) {
    r.code = uint8_t(mag + 16);  // 2^(f - 7) (1 + m / 8): E + 9 = f + 2
  } else {
    const int msb = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // subnormal m * 2^-9 = 2^(msb - 9) (m / 2^msb)
    r.code = uint8_t((msb << 3) | ((m << (3 - msb)) & 7));
  }
  return r;
}

// The block scale a scale code stands for (the true scale, without the prescale): Inf for the NaN
// marker (whose codes are zero, so products are NaN).
FP4MOE_HD float scale_of_code(uint8_t c, bool mxfp4) {
  return bf16_to_float(prescaled_scale_bits(c, mxfp4)) * bits_float(uint32_t(127 - 119) << 23);
}

// The kernels' decode of k16 step j's two scale codes (rows r0 and r1) from the thread's 8 scale
// bytes (word 0: steps 0 and 1, word 1: steps 2 and 3): bf16x2 {S(r0), S(r1)}.
FP4MOE_HD uint32_t scale_pair_bits(uint32_t word, int j, ScaleCodec k) {
#if defined(__CUDA_ARCH__)
  const uint32_t pair = __byte_perm(word, 0u, (j & 1) ? 0x4342u : 0x4140u);
#else
  const uint32_t pair = (j & 1) ? ((word >> 16) & 0xffu) | ((word >> 24) << 16) : (word & 0xffu) | ((word >> 8) & 0xffu) << 16;
#endif
  return pair * k.mul + (k.bias | (k.bias << 16));
}

}  // namespace fp4moe::layout
