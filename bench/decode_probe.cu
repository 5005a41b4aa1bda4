// fp4moe-decode-probe: the sm90 decode K loop alone, with its operands already in shared memory.
//
// The decode GEMMs stream ~22-26 GB/s of FP4 weights per SM where the copy floor needs ~32, and no
// pipe is saturated in ncu (docs/perf-notes.md). This probe runs the consumer's per-chunk work of
// src/gemm/sm90/consumer.cuh (traits.cuh's decode_k16 and RS wgmma, the scale codec) with no
// producer, no barriers and no global memory, one CTA per SM, in variants that take parts away:
//   full        LDS of the codes and scales, decode, 4 wgmma a 64-wide K chunk (double-buffered A)
//   decode      the same without the wgmma (the fragments kept live by empty asm)
//   mma         the wgmma alone, on fragments decoded once
//   interleave  decode and issue one k16 step at a time (a warpgroup fence before each wgmma)
//   full-fma    the full mode with the decode's rotations on the FMA pipe (decode-fma: without MMAs)
//   sync        the decode with warp-level mma.sync m16n8k16 (B by ldmatrix) instead of wgmma
//   sync-mma    those MMAs and B loads alone
//   full-hi     the full mode with register 3's right shift by 2 as a high multiply (FMA pipe, not
//               the ALU; decode-hi: without the MMAs)
//   full-rot4   the full mode with register 2's shift by 4 as a funnel shift (the ALU, where ptxas
//               puts decode_k16's as an IMAD.SHL on the FMA pipe); rot46: register 3's shift by 6 too
//   mix-rs      half the warpgroups run the MMAs alone (register-sourced A, as the kernels), the
//               other half the decode alone, side by side on each SM: does a warpgroup's RS wgmma
//               slow another warpgroup's decode more than its issue slots explain? mix-ss: the
//               same with the MMAs' A read from shared memory (timing only); mix-rs-nomul: RS, the
//               decode without its scale work (as full-nomul); mix-idle: the same kernel with the
//               MMA half idle (the control). Reported per half. The MMA half runs kMixMmaFactor
//               times the chunks (since session 14's runs 7-8, whose MMA half ran as many chunks
//               as the decode half and ended first, so that their decode figures mixed time beside
//               the MMAs with time alone).
//   full-nomul  the full mode without the scale multiplies, and so without the scale decode too
//               (its result unused, ptxas drops the byte permutes and multiply-adds; wrong values,
//               timing only)
//   full-1buf   the full mode with one fragment buffer, as the kernels' wide tiles (BN64/80/96/128
//               with 4 consumers) run: a chunk's decode waits for the warpgroup's previous MMAs
// for 1 to 8 consumer warpgroups a CTA and wgmma N of 8 to 128 ("--set wide": the prefill tiles'
// N with one and two fragment buffers; "--set decode": the N <= 32 variants; "--set layout": the
// decode's pipe balance (fma, hi, nomul); "--set overlap": the mix modes; "--set pipeline"). It prints, per variant, the
// cycles a warpgroup takes per chunk and the weight rate that would be per SM and per GPU. Then the
// same with memory ("pipeline"): a producer thread streaming weights from a buffer larger than L2
// through 4, 6 or 9 stages, the consumers only releasing them ("stream") or decoding and running
// the MMAs too ("stream+mma", N = 16; "/n8": m64n8k16, as BN16 tiles of at most 8 tokens run since
// session 14), as the BN16 decode kernels do without their tile logic; then cut
// into tiles of 112 or 32 chunks, drained at each end ("+epi": and a stand-in epilogue). A
// diagnostic for choosing what to change in the kernels; the product's speed is fp4moe-bench's.
//
//   fp4moe-decode-probe [--iters N] [--reps N] [--set S] [--fill const|random]
// (--fill: the pipeline's buffers, one repeated byte by default or varied bits; see fill_weights_random)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/common/hash_rng.h"
#include "src/gemm/sm90/traits.cuh"

namespace fp4moe::sm90::probe {

enum Mode : int {
  kFull, kDecode, kMma, kInterleave, kSync, kSyncMma, kFullFma, kDecodeFma, kFull1,
  kFullHi, kDecodeHi, kFullNoMul, kDecodeNoMul, kFullRot4, kDecodeRot4, kFullRot46, kDecodeRot46,
  kMixRs, kMixSs, kMixRsNoMul, kMixIdle
};
constexpr const char* kModeNames[] = {"full",     "decode",   "mma",        "interleave", "sync",
                                      "sync-mma", "full-fma", "decode-fma", "full-1buf",  "full-hi",
                                      "decode-hi", "full-nomul", "decode-nomul", "full-rot4", "decode-rot4",
                                      "full-rot46", "decode-rot46", "mix-rs", "mix-ss", "mix-rs-nomul", "mix-idle"};
constexpr bool mixed_mode(int m) { return m == kMixRs || m == kMixSs || m == kMixRsNoMul || m == kMixIdle; }
// The mix modes' MMA half runs this many times the decode half's chunks, so that the decode half
// runs beside MMAs from its first chunk to its last (its figure is then clean; the MMA half's
// mixes time beside the decode with time alone).
constexpr int kMixMmaFactor = 4;
constexpr bool decode_only(int m) {
  return m == kDecode || m == kDecodeFma || m == kDecodeHi || m == kDecodeNoMul || m == kDecodeRot4 ||
         m == kDecodeRot46;
}
constexpr bool full_mode(int m) {
  return m == kFull || m == kFullFma || m == kFullHi || m == kFullNoMul || m == kFullRot4 || m == kFullRot46;
}
constexpr int kSlots = 8;  // chunk slots the loop cycles through (the kernels' stages x chunks)

// decode_k16 with every shift on the FMA pipe (session 8 tried the rotations there in the kernel, on
// the layout before session 14's, and lost 2-5%): the left shifts by 4 and 6 as products by 16 and
// 64, the right shift by 2 as the high word of a product by 2^30, and the rotation by 10 as the two
// halves of a 64-bit product by 2^10, merged by the masking LOP3 ((lo | hi) & mask). decode_k16_hi:
// only the right shift by 2 moved (ptxas issues decode_k16's shifts by 4 and 6 as IMAD.SHL already).
// main() checks that both give decode_k16's bits (check_fma_decode) before timing anything.
__device__ __forceinline__ uint32_t mul_u32(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.lo.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t mul_hi_u32(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint2 mul_wide_u32(uint32_t a, uint32_t b) {
  uint64_t d;
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(d) : "r"(a), "r"(b));
  return make_uint2(uint32_t(d), uint32_t(d >> 32));
}
__device__ __forceinline__ uint32_t lop3_or_and(uint32_t a, uint32_t b, uint32_t c) {  // (a | b) & c
  uint32_t d;  // truth table (0xF0 | 0xCC) & 0xAA
  asm("lop3.b32 %0, %1, %2, %3, 0xA8;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
struct FmaConsts {
  uint32_t k16, k64, k1024, k2p30;
};
template <bool kAll>
__device__ __forceinline__ void decode_k16_fma(uint32_t w, uint32_t s_pair, uint32_t (&a)[4], const FmaConsts& k) {
  constexpr uint32_t kMask = 0x81C081C0u;
  a[0] = bf16x2_mul_half<0>(w & kMask, s_pair);
  if constexpr (kAll) {
    const uint2 r10 = mul_wide_u32(w, k.k1024);
    a[1] = bf16x2_mul_half<1>(lop3_or_and(r10.x, r10.y, kMask), s_pair);
    a[2] = bf16x2_mul_half<0>(mul_u32(w, k.k16) & kMask, s_pair);
    a[3] = bf16x2_mul_half<1>((mul_u32(w, k.k64) & 0x80C080C0u) | (mul_hi_u32(w, k.k2p30) & 0x01000100u), s_pair);
  } else {
    a[1] = bf16x2_mul_half<1>(layout::fragment_bits(w, 1), s_pair);
    a[2] = bf16x2_mul_half<0>(layout::fragment_bits(w, 2), s_pair);
    a[3] = bf16x2_mul_half<1>(((w << 6) & 0x80C080C0u) | (mul_hi_u32(w, k.k2p30) & 0x01000100u), s_pair);
  }
}

// decode_k16 with the left shifts by 4 (and, kBoth, by 6) as funnel shifts (SHF on the ALU pipe).
template <bool kBoth>
__device__ __forceinline__ void decode_k16_rot(uint32_t w, uint32_t s_pair, uint32_t (&a)[4]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  a[0] = bf16x2_mul_half<0>(w & kMask, s_pair);
  a[1] = bf16x2_mul_half<1>(layout::fragment_bits(w, 1), s_pair);
  a[2] = bf16x2_mul_half<0>(__funnelshift_l(w, w, 4) & kMask, s_pair);
  const uint32_t w6 = kBoth ? __funnelshift_l(w, w, 6) : mul_u32(w, 64u);  // (kBoth false: an IMAD.SHL)
  a[3] = bf16x2_mul_half<1>((w6 & 0x80C080C0u) | ((w >> 2) & 0x01000100u), s_pair);
}

// decode_k16_fma and decode_k16_rot (both forms each) against decode_k16 on n words (word i: a hash of i), each with scale
// pair i's bits: the count of differing registers goes to *bad.
__global__ void check_fma_decode(int n, unsigned int* bad) {
  const layout::ScaleCodec codec = layout::scale_codec(false);
  const FmaConsts k{opaque_u32(16), opaque_u32(64), opaque_u32(1024), opaque_u32(1u << 30)};
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t w = uint32_t(i) * 2654435761u ^ (uint32_t(i) >> 7) * 40503u;
    const uint32_t s_pair = layout::scale_pair_bits(uint32_t(i) * 97u % (144u * 256u), i % 4, codec);
    uint32_t a[4], b[4], c[4], d[4], e[4];
    decode_k16(w, s_pair, a);
    decode_k16_fma<true>(w, s_pair, b, k);
    decode_k16_fma<false>(w, s_pair, c, k);
    decode_k16_rot<false>(w, s_pair, d);
    decode_k16_rot<true>(w, s_pair, e);
    for (int q = 0; q < 4; ++q)
      if (a[q] != b[q] || a[q] != c[q] || a[q] != d[q] || a[q] != e[q]) atomicAdd(bad, 1u);
  }
}

// One batch of MMAs on `acc` (issued by `issue`) behind a warpgroup fence, committed; then the
// previous batch waited for.
template <int kAcc, class Issue>
__device__ __forceinline__ void mma_batch(float (&acc)[kAcc], Issue&& issue) {
  fence_accumulators(acc);
  cute::warpgroup_arrive();
  issue();
  cute::warpgroup_commit_batch();
  fence_accumulators(acc);
  cute::warpgroup_wait<1>();
}

// The MMA half of a chunk as consume_tile issues it: the decoded fragments `f`, the four k16 steps
// on B descriptor `desc` (the first one starting the sum when `first`) behind one warpgroup fence,
// committed; then the previous chunk's MMAs waited for, so that its buffer `other` may be rewritten.
template <int kN>
__device__ __forceinline__ void mma_chunk(uint32_t (&f)[4][4], uint32_t (&other)[4][4], float (&acc)[kN / 2],
                                          uint64_t desc, bool first) {
  fence_fragments(f);
  mma_batch(acc, [&] {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      mma_rs<typename RsMma<kN>::Op>(f[j], desc + uint64_t(2 * j), acc,
                                     j == 0 && first ? gmma::ScaleOut::Zero : gmma::ScaleOut::One,
                                     std::make_index_sequence<kN / 2>{});
  });
  fence_fragments(other);
}

// One m64nNk16 wgmma with both operands in shared memory (the mix-ss probe's MMAs; timing only).
template <class Op, int N, size_t... I>
__device__ __forceinline__ void mma_ss(uint64_t desc_a, uint64_t desc_b, float (&d)[N], gmma::ScaleOut scale_d,
                                       std::index_sequence<I...>) {
  Op::fma(desc_a, desc_b, d[I]..., scale_d);
}

template <int kWGs, int kN>
struct ProbeLayout {
  static constexpr int kBTile = kN * 128;  // kN rows x 64 bf16, 128-byte swizzle (whole 8-row atoms)
  static constexpr int kOffW = kSlots * kBTile;
  static constexpr int kChunkW = kWGs * layout::kUnitBytes;
  static constexpr int kBytes = kOffW + kSlots * kChunkW;
  static_assert(kBTile % 1024 == 0, "whole swizzle atoms");
};

template <int kWGs, int kMode, int kN>
__global__ void __launch_bounds__(kWGs * 128, 1)
    decode_loop(const uint4* src, int iters, uint32_t* sink, long long* cycles) {
  using L = ProbeLayout<kWGs, kN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  for (int i = threadIdx.x; i < L::kBytes / 16; i += blockDim.x) reinterpret_cast<uint4*>(smem)[i] = src[i];
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128;
  const uint32_t w_base = smem_addr(smem + L::kOffW + wg * layout::kUnitBytes);
  const uint32_t my_codes = opaque_u32(w_base + tid * 16);
  const uint32_t my_scales = opaque_u32(w_base + layout::kUnitCodeBytes + (tid / 4) * 8);
  const uint64_t desc0 = opaque_u64(smem_desc_k128(smem_addr(smem)));
  // The codec as the kernels have it, a runtime value (a constant one makes the scale's multiply-add an
  // LEA on the ALU pipe; the kernels' is an IMAD).
  // (ptxas sees through opaque_u32's mov; iters > 0 is a value it cannot know.)
  const uint32_t runtime_zero = uint32_t(iters) >> 31;
  const layout::ScaleCodec codec{layout::scale_codec(false).mul + runtime_zero, layout::scale_codec(false).bias};
  constexpr int kAcc = kN / 2;
  float acc[kAcc];
  uint32_t a[2][4][4];
  // (The multipliers of the FMA-pipe decode, opaque so that ptxas keeps them multiplies.)
  const FmaConsts fma_k{opaque_u32(16), opaque_u32(64), opaque_u32(1024), opaque_u32(1u << 30)};
  // A chunk's code words (one a k16 step) and its scale words (steps 0-1 and 2-3) from slot `slot`.
  auto load = [&](int slot, uint32_t(&words)[4], uint2& sc) {
    const uint32_t off = uint32_t(slot) * L::kChunkW;
    const uint4 codes = lds_u32x4(my_codes + off);
    sc = lds_u32x2(my_scales + off);
    words[0] = codes.x, words[1] = codes.y, words[2] = codes.z, words[3] = codes.w;
  };
  auto decode = [&](uint32_t(&f)[4][4], int slot) {
    uint32_t words[4];
    uint2 sc;
    load(slot, words, sc);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t s_pair = layout::scale_pair_bits(j < 2 ? sc.x : sc.y, j, codec);
      if constexpr (kMode == kFullFma || kMode == kDecodeFma)
        decode_k16_fma<true>(words[j], s_pair, f[j], fma_k);
      else if constexpr (kMode == kFullHi || kMode == kDecodeHi)
        decode_k16_fma<false>(words[j], s_pair, f[j], fma_k);
      else if constexpr (kMode == kFullRot4 || kMode == kDecodeRot4)
        decode_k16_rot<false>(words[j], s_pair, f[j]);
      else if constexpr (kMode == kFullRot46 || kMode == kDecodeRot46)
        decode_k16_rot<true>(words[j], s_pair, f[j]);
      else if constexpr (kMode == kFullNoMul || kMode == kDecodeNoMul || kMode == kMixRsNoMul) {
#pragma unroll
        for (int q = 0; q < 4; ++q) f[j][q] = layout::fragment_bits(words[j], q);
        (void)s_pair;
      } else
        decode_k16(words[j], s_pair, f[j]);
    }
  };
  auto desc_of = [&](int slot) { return desc0 + uint64_t(uint32_t(slot) * (L::kBTile / 16)); };
  auto mma = [&](const uint32_t(&f)[4], uint64_t desc, bool zero) {
    mma_rs<typename RsMma<kN>::Op>(f, desc, acc, zero ? gmma::ScaleOut::Zero : gmma::ScaleOut::One,
                                   std::make_index_sequence<kAcc>{});
  };
  if constexpr (kMode == kMma || kMode == kMixRs || kMode == kMixRsNoMul) {
    decode(a[0], 0);
    decode(a[1], 1);
  }
  const bool mma_role = wg < kWGs / 2;  // the mixed modes' halves (warpgroup-uniform)
  // One chunk into fragment buffer kBuf (compile-time, so the buffers stay in registers).
  auto chunk = [&](auto buf_tag, int i) {
    constexpr int buf = decltype(buf_tag)::value;
    const int slot = i % kSlots;
    if constexpr (mixed_mode(kMode)) {
      if (mma_role) {
        if constexpr (kMode != kMixSs) {
          mma_chunk<kN>(a[buf], a[buf ^ 1], acc, desc_of(slot), i == 0);
        } else {
          // A: a 64-row K-major tile from the start of the B slots (8 KB at N = 16), any values
          mma_batch(acc, [&] {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              mma_ss<gmma::MMA_64x16x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
                  desc0 + uint64_t(2 * j), desc_of(slot) + uint64_t(2 * j), acc,
                  j == 0 && i == 0 ? gmma::ScaleOut::Zero : gmma::ScaleOut::One, std::make_index_sequence<kAcc>{});
          });
        }
        return;
      }
    }
    if constexpr (decode_only(kMode) || mixed_mode(kMode)) {  // (the mixed modes' decode half)
      decode(a[buf], slot);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        asm volatile("" : "+r"(a[buf][j][0]), "+r"(a[buf][j][1]), "+r"(a[buf][j][2]), "+r"(a[buf][j][3]));
      return;
    }
    if constexpr (kMode == kFull1) {
      cute::warpgroup_wait<0>();  // the previous chunk's MMAs no longer read the one buffer
      fence_fragments(a[0]);
      decode(a[0], slot);
      mma_chunk<kN>(a[0], a[0], acc, desc_of(slot), i == 0);
      return;
    }
    if constexpr (full_mode(kMode)) decode(a[buf], slot);
    if constexpr (kMode == kInterleave) {
      uint32_t words[4];
      uint2 sc;
      load(slot, words, sc);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        decode_k16(words[j], layout::scale_pair_bits(j < 2 ? sc.x : sc.y, j, codec), a[buf][j]);
#pragma unroll
        for (int q = 0; q < 4; ++q) cute::warpgroup_fence_operand(a[buf][j][q]);
        fence_accumulators(acc);
        cute::warpgroup_arrive();
        mma(a[buf][j], desc_of(slot) + uint64_t(2 * j), j == 0 && i == 0);
        fence_accumulators(acc);
      }
      cute::warpgroup_commit_batch();
      fence_accumulators(acc);
      cute::warpgroup_wait<1>();  // the previous chunk's MMAs are done: its buffer may be rewritten
      fence_fragments(a[buf ^ 1]);
    } else {
      mma_chunk<kN>(a[buf], a[buf ^ 1], acc, desc_of(slot), i == 0);
    }
  };
  // (warpgroup-uniform: every warp of a warpgroup runs the same count of wgmma)
  const int my_iters =
      !mixed_mode(kMode) || !mma_role ? iters : kMode == kMixIdle ? 0 : kMixMmaFactor * iters;
  const long long t0 = clock64();
  for (int i = 0; i < my_iters; i += 2) {
    chunk(std::integral_constant<int, 0>{}, i);
    chunk(std::integral_constant<int, 1>{}, i + 1);
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  const long long t1 = clock64();
  uint32_t x = 0;
  if (!decode_only(kMode) && kMode != kMixIdle && (!mixed_mode(kMode) || mma_role)) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) x ^= __float_as_uint(acc[i]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) x ^= a[0][j][q] ^ a[1][j][q];
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (tid == 0) cycles[blockIdx.x * kWGs + wg] = t1 - t0;
}

// The kernels' pipeline without their tile logic: one producer thread streams this CTA's own slice of
// a weight buffer larger than L2 (two chunks of kWGs units a stage, one bulk copy) and two token
// tiles from a small buffer (L2-resident) through kStages stages; the consumers wait for each stage,
// run the full mode's decode and MMAs on it (kCompute) or not, and release the previous stage after
// the next one's first chunk, as consume_tile does.
// tile_chunks (even): the consumers end a tile every tile_chunks chunks as consume_tile does (the
// MMAs drained, then with epi a stand-in epilogue: the accumulators through shared memory between
// two warpgroup barriers) and start the next with fresh accumulators; the producer streams on.
template <int kWGs, int kStages, bool kCompute, int kN = 16>
__global__ void __launch_bounds__((kWGs + 1) * 128, 1)
    stream_loop(const uint8_t* weights, const uint8_t* act, int chunks, int tile_chunks, int epi, int interleave,
                uint32_t* sink) {
  static_assert(kN == 8 || kN == 16, "the stream probe's B tile is 16 token rows (N = 8 reads the first 8)");
  constexpr int kBTile = 16 * 128, kChunkW = kWGs * layout::kUnitBytes, kSlotsS = 2 * kStages;
  constexpr int kOffW = kSlotsS * kBTile, kOffBars = kOffW + kSlotsS * kChunkW;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kOffBars);
  uint64_t* empty = full + kStages + 1;  // full[kStages + 1], then empty[kStages + 1] (the last: the sink)
  if (threadIdx.x == 0) {
    for (int s = 0; s <= kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kWGs * 128);
    fence_barrier_init();
  }
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128;
  if (wg == 0) {
    if (tid != 0) return;
    // Tile i of this CTA: the next tile of its own slice, or (interleave) tile blockIdx.x + i * grid
    // of the buffer, as the kernels' static schedule takes them (consecutive tiles of a CTA far apart).
    const int tiles_per_cta = chunks / tile_chunks;
    const uint64_t pol_w = policy_evict_first(), pol_a = policy_evict_last();
    int stage = 0;
    uint32_t phase = 0;
    for (int ku = 0; ku < chunks; ku += 2) {
      mbar_wait(&empty[stage], phase ^ 1);
      mbar_arrive_expect_tx(&full[stage], 2 * (kBTile + kChunkW));
      for (int c = 0; c < 2; ++c)
        bulk_g2s(smem + (2 * stage + c) * kBTile, act + ((ku + c) % 64) * kBTile, kBTile, &full[stage], pol_a);
      const int i = ku / tile_chunks;
      const int64_t tile = interleave ? blockIdx.x + int64_t(i) * gridDim.x : int64_t(blockIdx.x) * tiles_per_cta + i;
      const uint8_t* src = weights + (tile * tile_chunks + ku % tile_chunks) * kChunkW;
      bulk_g2s(smem + kOffW + 2 * stage * kChunkW, src, 2 * kChunkW, &full[stage], pol_w);
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    return;
  }
  const int c = wg - 1;
  const uint32_t w_base = smem_addr(smem + kOffW + c * layout::kUnitBytes);
  const uint32_t my_codes = opaque_u32(w_base + tid * 16);
  const uint32_t my_scales = opaque_u32(w_base + layout::kUnitCodeBytes + (tid / 4) * 8);
  const uint64_t desc0 = opaque_u64(smem_desc_k128(smem_addr(smem)));
  const layout::ScaleCodec codec = layout::scale_codec(false);
  float acc[kN / 2];
  uint32_t a[2][4][4];
  uint32_t x = 0;
  int stage = 0, prev = kStages;  // the sink barrier full[kStages]/empty[kStages]: no previous stage
  uint32_t phase = 0;
  auto chunk = [&](auto buf_tag, int slot, bool first) {
    constexpr int buf = decltype(buf_tag)::value;
    const uint32_t off = uint32_t(slot) * kChunkW;
    const uint4 codes = lds_u32x4(my_codes + off);
    const uint2 sc = lds_u32x2(my_scales + off);
    if constexpr (!kCompute) {
      x ^= codes.x ^ sc.x;
      return;
    }
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) decode_k16(words[j], layout::scale_pair_bits(j < 2 ? sc.x : sc.y, j, codec), a[buf][j]);
    mma_chunk<kN>(a[buf], a[buf ^ 1], acc, desc0 + uint64_t(uint32_t(slot) * (kBTile / 16)), first);
  };
  float* const stg = reinterpret_cast<float*>(smem + kOffBars + 2 * (kStages + 1) * 8) + c * 128 * (kN / 2);
  for (int k0 = 0; k0 < chunks; k0 += tile_chunks) {  // tiles (as the kernels' consumer loop)
    for (int ku = k0; ku < k0 + tile_chunks && ku < chunks; ku += 2) {  // the tile's K loop
      mbar_wait(&full[stage], phase);
      chunk(std::integral_constant<int, 0>{}, 2 * stage, ku == k0);
      mbar_arrive(&empty[prev]);
      prev = stage;
      chunk(std::integral_constant<int, 1>{}, 2 * stage + 1, false);
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    if constexpr (kCompute) {  // the tile's end: the MMAs drained (unconditionally, as consume_tile)
      cute::warpgroup_wait<0>();
      fence_fragments(a[0]);
      fence_fragments(a[1]);
      fence_accumulators(acc);
      if (epi) {
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) stg[i * 128 + tid] = acc[i];
        named_barrier_sync(1 + c, 128);
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) x ^= __float_as_uint(stg[i * 128 + (tid ^ 1)]);
        named_barrier_sync(1 + c, 128);
      }
    }
  }
  if constexpr (kCompute) {
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) x ^= __float_as_uint(acc[i]);
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

// --fill random: the stream probe's buffers hold varied bits instead of one repeated byte, as real
// checkpoints and activations do (the DRAM's and the tensor cores' power depend on how the bits
// toggle, the decode's work does not). Weights: random codes, scale codes of e4m3 exponents near 1
// (bytes 0x30..0x4f, no NaN); token tiles: finite bf16 of magnitude 2^-7..2^7.
__global__ void fill_weights_random(uint8_t* w, size_t bytes) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < bytes; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = uint32_t(fp4moe::detail::splitmix64(i));
    w[i] = i % layout::kUnitBytes < size_t(layout::kUnitCodeBytes) ? uint8_t(h) : uint8_t(0x30 + (h & 0x1f));
  }
}
__global__ void fill_act_random(uint16_t* a, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = uint32_t(fp4moe::detail::splitmix64(i + (1ull << 40)));
    a[i] = uint16_t((h & 0x8000u) | ((120u + (h >> 16) % 15u) << 7) | (h & 0x7fu));
  }
}

// Runs `launch` reps + 2 times (two warm-ups first), each between two events, and hands each timed
// launch's milliseconds to `after`. A failed launch ends the program with its error and `what`.
template <class Launch, class After>
void timed_launches(int reps, const char* what, Launch&& launch, After&& after) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int r = 0; r < reps + 2; ++r) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaError_t err = cudaEventSynchronize(e1);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) {
      std::fprintf(stderr, "error: %s failed: %s\n", what, cudaGetErrorString(err));
      std::exit(1);
    }
    if (r < 2) continue;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    after(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

template <int kWGs, int kStages, bool kCompute, int kN = 16>
void report_stream(int sms, int chunks, int reps, const uint8_t* d_w, const uint8_t* d_act, uint32_t* d_sink,
                   int tile_chunks = 0, int epi = 0, int interleave = 0) {
  constexpr int kChunkW = kWGs * layout::kUnitBytes;
  if (tile_chunks <= 0) tile_chunks = chunks;
  if (chunks % 2 != 0 || tile_chunks % 2 != 0 || chunks % tile_chunks != 0) {  // two chunks a stage, whole tiles
    std::fprintf(stderr, "error: stream probe: %d chunks in tiles of %d (both even, whole tiles)\n", chunks,
                 tile_chunks);
    std::exit(2);
  }
  const int smem = 2 * kStages * (16 * 128 + kChunkW) + (kStages + 1) * 16 + kWGs * 128 * 8 * 4 + 1024;
  auto kernel = stream_loop<kWGs, kStages, kCompute, kN>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    std::fprintf(stderr, "error: cudaFuncSetAttribute: %s\n", cudaGetErrorString(cudaGetLastError()));
    std::exit(1);
  }
  std::vector<float> times;
  timed_launches(
      reps, "stream probe",
      [&] { kernel<<<sms, (kWGs + 1) * 128, smem>>>(d_w, d_act, chunks, tile_chunks, epi, interleave, d_sink); },
      [&](float ms) { times.push_back(ms); });
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double bytes = double(sms) * chunks * kChunkW;
  char name[32];
  std::snprintf(name, sizeof name, "%s%s%s%s", kCompute ? "stream+mma" : "stream", kN == 8 ? "/n8" : "",
                epi ? "+epi" : "", interleave ? "+il" : "");
  std::printf("%-20s  %3d  %6d  %6d  %5d  %9.1f  %8.2f  %9.1f\n", name, kWGs, kStages, chunks, tile_chunks, ms * 1e3,
              bytes / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9 / sms);
}

// The same chunk with warp-level MMAs (mma.sync m16n8k16, the A fragment of a warp's 16 rows being
// exactly its part of the wgmma A operand) instead of wgmma: per chunk and warp, the token tile's B
// fragments of the 4 k16 steps by ldmatrix (one x4 a step: two n8 halves of 16 tokens) and 8 MMAs
// into the same 8 fp32 accumulators. kMode kSync decodes as the full mode; kSyncMma only loads B and
// runs the MMAs on fragments decoded once.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int kWGs, int kMode>
__global__ void __launch_bounds__(kWGs * 128, 1)
    sync_loop(const uint4* src, int iters, uint32_t* sink, long long* cycles) {
  using L = ProbeLayout<kWGs, 16>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  for (int i = threadIdx.x; i < L::kBytes / 16; i += blockDim.x) reinterpret_cast<uint4*>(smem)[i] = src[i];
  __syncthreads();
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, lane = threadIdx.x % 32;
  const uint32_t w_base = smem_addr(smem + L::kOffW + wg * layout::kUnitBytes);
  const uint32_t my_codes = opaque_u32(w_base + tid * 16);
  const uint32_t my_scales = opaque_u32(w_base + layout::kUnitCodeBytes + (tid / 4) * 8);
  // ldmatrix.x4 of k16 step j: lanes 0-15 address token rows 0-15 at the step's first 16 bytes,
  // lanes 16-31 the same rows at its second 16 bytes (the 128-byte swizzle: piece ^ row % 8).
  const int row = lane % 16, piece0 = lane / 16;
  const uint32_t b_row = opaque_u32(smem_addr(smem) + row * 128);
  const layout::ScaleCodec codec = layout::scale_codec(false);
  float acc[2][4] = {};
  uint32_t a[4][4];
  auto decode = [&](int slot) {
    const uint32_t off = uint32_t(slot) * L::kChunkW;
    const uint4 codes = lds_u32x4(my_codes + off);
    const uint2 sc = lds_u32x2(my_scales + off);
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) decode_k16(words[j], layout::scale_pair_bits(j < 2 ? sc.x : sc.y, j, codec), a[j]);
  };
  if constexpr (kMode == kSyncMma) decode(0);
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
    const int slot = i % kSlots;
    if constexpr (kMode == kSync) decode(slot);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b[4];
      const uint32_t addr = b_row + uint32_t(slot) * L::kBTile + uint32_t(((2 * j + piece0) ^ (row % 8)) * 16);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                   : "r"(addr));
      mma_16816(acc[0], a[j], b[0], b[2]);
      mma_16816(acc[1], a[j], b[1], b[3]);
    }
  }
  const long long t1 = clock64();
  uint32_t x = 0;
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) x ^= __float_as_uint(acc[n][i]);
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (tid == 0) cycles[blockIdx.x * kWGs + wg] = t1 - t0;
}

struct Result {
  double ms, cycles_per_chunk;
  double first_half, second_half;  // medians over warpgroups < kWGs / 2 and the rest (mixed modes)
};

template <int kWGs, int kMode, int kN>
Result run(int sms, int iters, int reps, const uint4* d_src, uint32_t* d_sink, long long* d_cycles) {
  using L = ProbeLayout<kWGs, kN>;
  const int smem = L::kBytes + 1024;
  auto kernel = [] {
    if constexpr (kMode == kSync || kMode == kSyncMma) return sync_loop<kWGs, kMode>;
    else return decode_loop<kWGs, kMode, kN>;
  }();
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    std::fprintf(stderr, "error: cudaFuncSetAttribute: %s\n", cudaGetErrorString(cudaGetLastError()));
    std::exit(1);
  }
  std::vector<float> times;
  std::vector<long long> cyc(size_t(sms) * kWGs);
  std::vector<double> per_chunk, first_half, second_half;
  std::vector<long long> lo, hi;
  char what[64];
  std::snprintf(what, sizeof what, "probe %s x%d N=%d", kModeNames[kMode], kWGs, kN);
  timed_launches(
      reps, what, [&] { kernel<<<sms, kWGs * 128, smem>>>(d_src, iters, d_sink, d_cycles); },
      [&](float ms) {
        times.push_back(ms);
        cudaMemcpy(cyc.data(), d_cycles, cyc.size() * sizeof(long long), cudaMemcpyDeviceToHost);
        lo.clear(), hi.clear();
        for (size_t k = 0; k < cyc.size(); ++k) (int(k % kWGs) < kWGs / 2 ? lo : hi).push_back(cyc[k]);
        std::sort(cyc.begin(), cyc.end());
        per_chunk.push_back(double(cyc[cyc.size() / 2]) / iters);
        if (!lo.empty()) {
          std::sort(lo.begin(), lo.end());
          first_half.push_back(double(lo[lo.size() / 2]) / (mixed_mode(kMode) ? kMixMmaFactor * iters : iters));
        }
        std::sort(hi.begin(), hi.end());
        second_half.push_back(double(hi[hi.size() / 2]) / iters);
      });
  std::sort(times.begin(), times.end());
  std::sort(per_chunk.begin(), per_chunk.end());
  std::sort(first_half.begin(), first_half.end());
  std::sort(second_half.begin(), second_half.end());
  return {times[times.size() / 2], per_chunk[per_chunk.size() / 2],
          first_half.empty() ? 0.0 : first_half[first_half.size() / 2], second_half[second_half.size() / 2]};
}

template <int kWGs, int kMode, int kN>
void report(int sms, int iters, int reps, const uint4* d_src, uint32_t* d_sink, long long* d_cycles) {
  const Result r = run<kWGs, kMode, kN>(sms, iters, reps, d_src, d_sink, d_cycles);
  // Weight bytes the loop would have streamed: a 64 x 64 unit (2304 bytes) per warpgroup and chunk.
  const double bytes_per_sm = double(kWGs) * iters * layout::kUnitBytes;
  const double gbps_sm = bytes_per_sm / (r.ms * 1e-3) / 1e9;
  // (the mix modes: the clock from the half that ran longest, the MMA half's kMixMmaFactor x iters)
  const double ghz = (mixed_mode(kMode) ? std::max(r.first_half * kMixMmaFactor, r.second_half) : r.cycles_per_chunk) *
                     iters / (r.ms * 1e-3) / 1e9;
  if constexpr (mixed_mode(kMode)) {  // each half's own cycles a chunk (no per-unit or rate columns)
    if (kMode == kMixIdle)
      std::printf("%-10s  %3d  %3d  MMA warpgroups idle, decode warpgroups %.1f cycles a chunk\n", kModeNames[kMode],
                  kWGs, kN, r.second_half);
    else
      std::printf("%-10s  %3d  %3d  MMA warpgroups %.1f, decode warpgroups %.1f cycles a chunk  %6.2f GHz\n",
                  kModeNames[kMode], kWGs, kN, r.first_half, r.second_half, ghz);
    return;
  }
  std::printf("%-10s  %3d  %3d  %9.1f  %8.1f  %9.1f  %8.2f  %6.2f\n", kModeNames[kMode], kWGs, kN,
              r.cycles_per_chunk, r.cycles_per_chunk / kWGs, gbps_sm, gbps_sm * sms / 1e3, ghz);
}

}  // namespace fp4moe::sm90::probe

int main(int argc, char** argv) {
  using namespace fp4moe::sm90::probe;
  int iters = 20000, reps = 5;
  std::string set = "all";
  bool fill_random = false, fill_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || v <= 0 || v > (1L << 30)) {
        std::fprintf(stderr, "error: %s = '%s' is not an integer in [1, 2^30]\n", a.c_str(), argv[i]);
        std::exit(2);
      }
      return int(v);
    };
    if (a == "--iters") iters = (value() + 1) / 2 * 2;
    else if (a == "--reps") reps = value();
    else if (a == "--set" && i + 1 < argc && (std::string(argv[i + 1]) == "all" || std::string(argv[i + 1]) == "decode" ||
                                             std::string(argv[i + 1]) == "wide" || std::string(argv[i + 1]) == "layout" ||
                                             std::string(argv[i + 1]) == "overlap" ||
                                             std::string(argv[i + 1]) == "pipeline"))
      set = argv[++i];
    else if (a == "--fill" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "const" || std::string(argv[i + 1]) == "random"))
      fill_random = std::string(argv[++i]) == "random", fill_given = true;
    else {
      std::fprintf(stderr, "fp4moe-decode-probe: '%s%s%s' is not an argument it takes\n", a.c_str(),
                   i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
      std::fprintf(stderr,
                   "usage: fp4moe-decode-probe [--iters N (rounded up to even)] [--reps N] "
                   "[--set all|decode|wide|layout|overlap|pipeline] [--fill const|random]\n");
      return 2;
    }
  }
  if (fill_given && set != "all" && set != "pipeline") {
    std::fprintf(stderr, "error: --fill sets the pipeline probe's buffers; --set %s runs no pipeline\n",
                 set.c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    std::fprintf(stderr, "error: fp4moe-decode-probe needs an sm_90 GPU\n");
    return 1;
  }
  const int sms = prop.multiProcessorCount;
  // Random operands (codes, scale codes and the token tile): the timing does not depend on them.
  constexpr int kMaxBytes = std::max({ProbeLayout<8, 16>::kBytes, ProbeLayout<4, 32>::kBytes, ProbeLayout<4, 128>::kBytes});
  std::vector<uint8_t> host(kMaxBytes);
  std::mt19937 rng(1234);
  for (auto& b : host) b = uint8_t(rng());
  uint4* d_src = nullptr;
  uint32_t* d_sink = nullptr;
  long long* d_cycles = nullptr;
  unsigned int* d_bad = nullptr;
  if (cudaMalloc(&d_src, kMaxBytes) != cudaSuccess || cudaMalloc(&d_sink, size_t(sms) * 1024 * 4) != cudaSuccess ||
      cudaMalloc(&d_cycles, size_t(sms) * 8 * sizeof(long long)) != cudaSuccess ||
      cudaMalloc(&d_bad, sizeof(unsigned int)) != cudaSuccess ||
      cudaMemcpy(d_src, host.data(), kMaxBytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemset(d_bad, 0, sizeof(unsigned int)) != cudaSuccess) {
    std::fprintf(stderr, "error: device buffers: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  // The FMA-pipe decode must give decode_k16's bits (else its timing means nothing).
  constexpr int kCheckWords = 1 << 22;
  check_fma_decode<<<sms * 4, 256>>>(kCheckWords, d_bad);
  unsigned int bad = 0;
  if (cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::fprintf(stderr, "error: check_fma_decode: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  if (bad != 0) {
    std::fprintf(stderr, "error: decode_k16_fma or decode_k16_rot differs from decode_k16 in %u of %d registers\n", bad,
                 4 * kCheckWords);
    return 1;
  }
  cudaFree(d_bad);
  std::printf("decode_k16_fma and decode_k16_rot (both forms each) give decode_k16's bits on %d words\n", kCheckWords);
  std::printf("%s, %d SMs; %d chunks a warpgroup, median of %d launches\n", prop.name, sms, iters, reps);
  std::printf("%-10s  %3s  %3s  %9s  %8s  %9s  %8s  %6s\n", "variant", "WGs", "N", "cyc/chunk", "cyc/unit",
              "GB/s/SM", "TB/s", "GHz");
  // The variant sets (--set), each a list of report<warpgroups, mode, N> instantiations.
  using ReportFn = void (*)(int, int, int, const uint4*, uint32_t*, long long*);
  static constexpr ReportFn kDecodeSet[] = {
      report<4, kFull, 16>,
      report<4, kDecode, 16>,
      report<4, kMma, 16>,
      report<4, kInterleave, 16>,
      report<4, kFullFma, 16>,
      report<4, kDecodeFma, 16>,
      report<4, kSync, 16>,
      report<4, kSyncMma, 16>,
      report<8, kSync, 16>,
      report<2, kSync, 16>,
      report<8, kDecode, 16>,
      report<6, kFull, 16>,
      report<6, kDecode, 16>,
      report<6, kMma, 16>,
      report<3, kFull, 16>,
      report<2, kFull, 16>,
      report<2, kDecode, 16>,
      report<2, kMma, 16>,
      report<1, kFull, 16>,
      report<1, kDecode, 16>,
      report<1, kMma, 16>,
      report<4, kFull, 8>,
      report<4, kMma, 8>,
      report<4, kFull, 32>,
      report<4, kMma, 32>,
  };
  // The prefill tiles' N (BN48-BN128 run 4 consumers; BN64/80/96/128 single-buffered): does the
  // decode overlap the MMAs once those take longer than it? The decode alone is the N = 16 row.
  static constexpr ReportFn kWideSet[] = {
      report<4, kDecode, 16>,
      report<4, kMma, 48>,
      report<4, kFull, 48>,
      report<4, kFull1, 48>,
      report<4, kMma, 64>,
      report<4, kFull, 64>,
      report<4, kFull1, 64>,
      report<4, kMma, 80>,
      report<4, kFull, 80>,
      report<4, kFull1, 80>,
      report<3, kFull, 80>,
      report<3, kFull1, 80>,
      report<2, kFull, 80>,
      report<2, kMma, 80>,
      report<4, kMma, 96>,
      report<4, kFull, 96>,
      report<4, kFull1, 96>,
      report<4, kMma, 128>,
      report<4, kFull, 128>,
      report<4, kFull1, 128>,
      report<2, kFull, 128>,
      report<2, kMma, 128>,
  };
  // The decode's pipe balance at the decode N (16, 32) and BN80's.
  static constexpr ReportFn kLayoutSet[] = {
      report<4, kFull, 16>,
      report<4, kDecode, 16>,
      report<4, kMma, 16>,
      report<4, kFullHi, 16>,
      report<4, kDecodeHi, 16>,
      report<4, kFullFma, 16>,
      report<4, kDecodeFma, 16>,
      report<4, kFullNoMul, 16>,
      report<4, kDecodeNoMul, 16>,
      report<4, kFullRot4, 16>,
      report<4, kDecodeRot4, 16>,
      report<4, kFullRot46, 16>,
      report<4, kDecodeRot46, 16>,
      report<4, kFullRot4, 80>,
      report<6, kFull, 16>,
      report<4, kFull, 32>,
      report<4, kFullHi, 32>,
      report<4, kFull, 80>,
      report<4, kFullHi, 80>,
      report<4, kFullNoMul, 80>,
  };
  // Does a warpgroup's wgmma slow another warpgroup's decode? Two decode warpgroups alone, then
  // beside two MMA warpgroups (RS, SS, RS with N = 8 and 32), cycles a chunk per half. (No
  // 8-warpgroup RS row: at 64 registers a thread ptxas serializes its wgmma, C7512.)
  static constexpr ReportFn kOverlapSet[] = {
      report<2, kDecode, 16>,
      report<2, kMma, 16>,
      report<4, kMixRs, 16>,
      report<4, kMixSs, 16>,
      report<2, kDecodeNoMul, 16>,
      report<4, kMixRsNoMul, 16>,
      report<4, kMixIdle, 16>,
      report<4, kMixRs, 8>,
      report<4, kMixRs, 32>,
      report<4, kDecode, 16>,
      report<4, kMma, 16>,
  };
  auto run_set = [&](const char* name, const auto& fns) {
    if (set != "all" && set != name) return;
    for (ReportFn f : fns) f(sms, iters, reps, d_src, d_sink, d_cycles);
  };
  run_set("decode", kDecodeSet);
  run_set("wide", kWideSet);
  run_set("layout", kLayoutSet);
  run_set("overlap", kOverlapSet);
  if (set != "all" && set != "pipeline") {
    cudaFree(d_src);
    cudaFree(d_sink);
    cudaFree(d_cycles);
    return 0;
  }
  // The pipeline with memory: each CTA streams its own slice (chunks x 4 units) of a buffer larger
  // than L2, once as long as a DeepSeek-R1 T=1 GEMM1 tile (112 chunks, 1 MB) and once 10x longer.
  const int long_chunks = 1120;
  const size_t w_bytes = size_t(sms) * long_chunks * 4 * fp4moe::layout::kUnitBytes;
  uint8_t* d_w = nullptr;
  uint8_t* d_act = nullptr;
  if (cudaMalloc(&d_w, w_bytes) != cudaSuccess || cudaMalloc(&d_act, 64 * 2048) != cudaSuccess) {
    std::fprintf(stderr, "error: cannot allocate %zu bytes for the stream probe\n", w_bytes);
    return 1;
  }
  cudaMemset(d_w, 0x5a, w_bytes);
  cudaMemset(d_act, 0x3c, 64 * 2048);
  if (fill_random) {
    fill_weights_random<<<sms * 8, 256>>>(d_w, w_bytes);
    fill_act_random<<<64, 256>>>(reinterpret_cast<uint16_t*>(d_act), 64 * 2048 / 2);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::fprintf(stderr, "error: --fill random: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
  }
  std::printf("\nstream buffers: %s\n", fill_random ? "random (--fill random)" : "one repeated byte (--fill const)");
  std::printf("\n%-20s  %3s  %6s  %6s  %5s  %9s  %8s  %9s\n", "pipeline", "WGs", "stages", "chunks", "tile", "us",
              "TB/s", "GB/s/SM");
  for (int chunks : {112, long_chunks}) {
    report_stream<4, 4, false>(sms, chunks, reps, d_w, d_act, d_sink);
    report_stream<4, 6, false>(sms, chunks, reps, d_w, d_act, d_sink);
    report_stream<4, 9, false>(sms, chunks, reps, d_w, d_act, d_sink);
    report_stream<4, 4, true>(sms, chunks, reps, d_w, d_act, d_sink);
    report_stream<4, 6, true>(sms, chunks, reps, d_w, d_act, d_sink);
    report_stream<4, 9, true>(sms, chunks, reps, d_w, d_act, d_sink);
    // "/n8": m64n8k16, as BN16 tiles of at most 8 tokens run
    report_stream<4, 6, true, 8>(sms, chunks, reps, d_w, d_act, d_sink);
  }
  // The long stream cut into tiles as the GEMMs' (GEMM1 at DeepSeek-R1: 112 chunks, GEMM2: 32), the
  // MMAs drained at each tile's end, with and without a stand-in epilogue.
  for (int tile : {112, 32}) {
    report_stream<4, 6, true>(sms, long_chunks, reps, d_w, d_act, d_sink, tile, 0);
    report_stream<4, 6, true>(sms, long_chunks, reps, d_w, d_act, d_sink, tile, 1);
    // "+il": a CTA's consecutive tiles far apart in memory, as the kernels' static schedule has them.
    report_stream<4, 6, false>(sms, long_chunks, reps, d_w, d_act, d_sink, tile, 0, 1);
    report_stream<4, 6, true>(sms, long_chunks, reps, d_w, d_act, d_sink, tile, 1, 1);
    report_stream<4, 6, true, 8>(sms, long_chunks, reps, d_w, d_act, d_sink, tile, 1, 1);
  }
  cudaFree(d_w);
  cudaFree(d_act);
  cudaFree(d_src);
  cudaFree(d_sink);
  cudaFree(d_cycles);
  return 0;
}
