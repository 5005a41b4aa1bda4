// sm_90a MoE GEMM configs (src/gemm/sm90/moe_gemm_sm90.cuh): Sm90Traits, every derived constant of
// one compiled config (src/gemm/sm90/compiled_configs.h) with static_asserts on its preconditions
// (shared-memory layout and budget, register split, pipeline shape), the register-sourced bf16 wgmma
// ops per N and the narrower N a small tile runs (NarrowN), and the decode of one k16 step of FP4
// weights into bf16 A fragments (decode_k16; the layout is src/moe/weight_layout.h's, the numerics
// src/format/block_codec.h's, matched by reference/moe_reference.cpp through the kernels' tests).
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // N = 48, 72, 80

#include <cstdint>
#include <utility>

#include "src/format/block_codec.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/ptx.cuh"

namespace fp4moe::sm90 {

namespace gmma = cute::SM90::GMMA;

// Tile metadata is cached in shared memory; routing caps the expert count at 512.
constexpr int kMaxLocalExperts = 512;

template <int kBN>
struct RsMma;
template <>
struct RsMma<8> {
  using Op = gmma::MMA_64x8x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<16> {
  using Op = gmma::MMA_64x16x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<32> {
  using Op = gmma::MMA_64x32x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<48> {
  using Op = gmma::MMA_64x48x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<64> {
  using Op = gmma::MMA_64x64x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<72> {
  using Op = gmma::MMA_64x72x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<80> {
  using Op = gmma::MMA_64x80x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<96> {
  using Op = gmma::MMA_64x96x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<128> {
  using Op = gmma::MMA_64x128x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};
template <>
struct RsMma<256> {
  using Op = gmma::MMA_64x256x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::K>;
};

// The narrower wgmma N a tile of kN runs when it has few tokens (NarrowN<kN>::kA / kB: a tile of
// at most kA, else at most kB tokens; 0: none). m64nNk16's accumulators are the first N / 2 of a
// wider one's (four per 8 tokens), so a narrower MMA fills a prefix of the same array with the
// same per-element k16 sequence: the same bits. Beside the decode an MMA costs more the wider it
// is (fp4moe-decode-probe), and the layer gained 1-6% from every size narrowed here except BN128,
// which lost at DeepSeek-R1 T=4096 and keeps one N (docs/perf-notes.md, sessions 14-15).
template <int kN>
struct NarrowN {
  static constexpr int kA = kN == 16 ? 8 : kN == 32 ? 8 : kN == 48 ? 16 : kN == 64 ? 32 : kN == 80 ? 64
                          : kN == 96 ? 72 : 0;
  static constexpr int kB = kN == 32 ? 16 : kN == 48 ? 32 : kN == 64 ? 48 : kN == 80 ? 72 : kN == 96 ? 80 : 0;
  static_assert(kA % 8 == 0 && kB % 8 == 0 && kA < kN && kB < kN && (kB == 0 || kA < kB),
                "NarrowN: whole 8-token accumulator groups, narrower than kN, kA below kB");
};

// scale_d = Zero overwrites the accumulators instead of adding to them: the first MMA of a tile
// starts the sum, so no ordinary instruction writes an accumulator while MMAs are in flight (ptxas
// would serialize every wgmma otherwise, C7515).
template <class Op, int N, size_t... I>
__device__ __forceinline__ void mma_rs(const uint32_t (&a)[4], uint64_t desc_b, float (&d)[N],
                                       gmma::ScaleOut scale_d, std::index_sequence<I...>) {
  Op::fma(a[0], a[1], a[2], a[3], desc_b, d[I]..., scale_d);
}

// Warpgroup fences on a chunk's A fragments (four k16 steps) and on the accumulators: ordinary
// instructions touching them stay on their side of the wgmma that read or write them.
__device__ __forceinline__ void fence_fragments(uint32_t (&f)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) cute::warpgroup_fence_operand(f[j][q]);
}
template <int kAcc>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) cute::warpgroup_fence_operand(acc[i]);
}

template <int kBN_, int kConsumers_, int kStages_, int kCtasPerSm_, bool kGemm1_, bool kDoubleBuffer_ = false,
          int kChunks_ = 1, bool kTail_ = false>
struct Sm90Traits {
  static constexpr bool kDoubleBuffer = kDoubleBuffer_;  // A fragments (see consume_tile)
  static constexpr int kBN = kBN_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kStages = kStages_;  // pipeline stages (one full/empty barrier pair each)
  // K chunks (64) per stage: with 2 or 4, the barrier waits, arrivals and stage bookkeeping of producer
  // and consumers happen once per two or four chunks. Chunk slots (kSlots) are laid out as with kChunks = 1.
  static constexpr int kChunks = kChunks_;
  static_assert(kChunks == 1 || kChunks == 2 || kChunks == 4,
                "consume_tile and the producer handle one, two or four chunks a stage");
  static constexpr int kSlots = kStages * kChunks;
  static constexpr int kCtasPerSm = kCtasPerSm_;
  static constexpr bool kGemm1 = kGemm1_;
  // May run tail launches (MoeGemmParams::tail_of; config.h's kTailConfig, Sm90Config::tail): the
  // 4-consumer BN32 tail kernels only.
  static constexpr bool kRunsTails = kTail_;
  static_assert(!kTail_ || (kBN == 32 && kConsumers == 4), "the tail kernels are the 4-consumer BN32's");
  // May run with MoeGemmParams::overlap (sm90::select_gemm_overlap picks only 16- and 32-token tiles):
  // the other kernels do not compile its code (in the 4-consumer BN96 GEMM1 it cost 5 SASS
  // instructions per K chunk through register allocation), nor do the tail kernels.
  static constexpr bool kOverlaps = compiles_gemm_overlap(kBN, kTail_);
  // Keeps the plan's per-expert counts and first rows in shared memory beside tile_start (three
  // tables of kMaxLocalExperts + 1 words), so that a tile's lookup (find_tile_shared) waits for no
  // global load: the 16-token tiles of decode, where each tile's setup is a visible share of the time
  // (a trace build at DeepSeek-R1 T=32: 1500-2700 cycles a tile to find it, 64-bit divisions
  // included, with GEMM1's K loop 57000 and GEMM2's 17000).
  static constexpr bool kSharedTileTables = kBN == 16;

  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kAccRegs = kBN / 2;              // m64 x BN fp32 over 128 threads
  static constexpr int kBTileBytes = kBN * 128;         // BN rows x 64 bf16
  static constexpr int kWeightStageBytes = kConsumers * layout::kUnitBytes;
  static constexpr int kStagingStride = 144;            // bytes per token row of the epilogue staging
  static constexpr int kStagingBytes = kBN * kStagingStride;

  // Shared memory (offsets from a 1024-aligned base).
  static constexpr int kOffB = 0;  // [kSlots][kBTileBytes]: swizzle atoms need 1024-byte alignment
  static constexpr int kOffW = kOffB + kSlots * kBTileBytes;  // [kSlots][kConsumers][2304]
  static constexpr int kOffStaging = kOffW + kSlots * kWeightStageBytes;
  static constexpr int kOffRowWeight = kOffStaging + kConsumers * kStagingBytes;  // [kConsumers][kBN] fp32
  // int32 [kMaxLocalExperts + 1]: tile_start; with kSharedTileTables, then counts and seg_start
  static constexpr int kOffTileStart = kOffRowWeight + kConsumers * kBN * 4;
  // The decode kernels' hand-off of each work unit's tile from the producer to the consumers, which
  // then do no lookup of their own: [kStages] int4 of (local expert, first row, rows, work unit),
  // in the slot of the unit's first stage (unit -1: no more units). The producer writes it between
  // its wait on that stage's empty barrier and its arrival on the full one; the consumers read it
  // after their wait on the full barrier, before they release the stage. The decode and small
  // GEMM2s (16 and 32 tokens; 32 since session 40), where tiles are short (32 K chunks at
  // DeepSeek-R1, 12 at Qwen3-30B), and both GEMMs' wide tiles (48
  // tokens or more: prefill), whose static schedule left GEMM1's CTAs ending up to ~2 tiles apart
  // (DeepSeek-R1 T=2048: 150 us of a 2.5-ms GEMM1, session 26's trace). In GEMM1's BN16 kernels it
  // cost the K loop 6 SASS instructions per four chunks (and in session 20's 4-consumer BN128 a
  // spill inside the K loop).
  static constexpr bool kTileHandoff = takes_dynamic_units(kBN, kGemm1, kTail_);
  // `counted` and `count_free` serve one role a kernel: GEMM1's overlap count or the unit hand-off.
  static_assert(!(kGemm1 && kOverlaps && kTileHandoff), "counted/count_free: one role per kernel");
  // A GEMM's main launch and its tail launch would share its unit counter, zeroed once a forward by
  // the plan: the tail kernels must keep a static schedule.
  static_assert(!(kRunsTails && kTileHandoff), "a tail-launch config must not take dynamic units");
  static constexpr int kOffTileInfo =
      kOffTileStart + ((kSharedTileTables ? 3 : 1) * (kMaxLocalExperts + 1) * 4 + 15) / 16 * 16;
  static constexpr int kOffBars = kOffTileInfo + (kTileHandoff ? kStages * 16 : 0);
  // full[kStages], empty[kStages], then one sink barrier that takes the releases of "no previous
  // stage" (a tile's first stage), so that the K loop releases unconditionally; nobody waits on it.
  // Then two for GEMM1's overlap count (count_gemm1_units) or the dynamic kernels' unit hand-off
  // (schedule_units), allotted in every kernel (16 bytes).
  // The dynamic kernels' next work unit (schedule_units), a word after the barriers.
  static constexpr int kOffNextUnit = kOffBars + (2 * kStages + 3) * 8;
  static constexpr int kSmemBytes = kOffNextUnit + (kTileHandoff ? 8 : 0) + 1024;  // + alignment slack

  // A tile of at most kSmallN tokens runs the K loop of N = kSmallN instead of kBN (0: no second
  // size), which may narrow its wgmma N further (NarrowN).
  // A config changes speed, never results: the per-element k16 sequence is the same for every N.
  // Every size is one more inlined copy of the K loop, and ptxas serializes all wgmma of a kernel
  // when any copy runs short of registers (C7512): double-buffered BN256 did with 256/64 and with
  // 256/128/64, and so did BN128 with 4 consumers (112 registers) with 128/64, so only BN128 with 2
  // consumers keeps N = 64 for small tiles (the experts' remainders).
  static constexpr int kSmallN = kBN == 128 && kConsumers == 2 ? 64 : 0;

  // Register reallocation (1 CTA per SM): the CTA launches with kLaunchRegs a thread (the 64K file
  // over its threads; ptxas gives a kernel that uses setmaxnreg exactly that, which
  // scripts/ptxas-check.sh verifies). setmaxnreg.dec returns the producer's surplus to a pool of the
  // CTA, and setmaxnreg.inc blocks until that pool holds what it asks for: the consumers may take
  // only what the producer gave back, or the CTA hangs (seen on an H200 with 4 consumers at 120).
  static constexpr bool kUseSetmaxnreg = kCtasPerSm == 1 && kConsumers >= 2;
  static constexpr uint32_t kLaunchRegs = (65536 / kThreads) / 8 * 8 > 255 ? 248 : (65536 / kThreads) / 8 * 8;
  static constexpr uint32_t kProducerRegs = kConsumers >= 4 ? 24 : 40;
  static constexpr uint32_t kConsumerRegsRaw = kLaunchRegs + (kLaunchRegs - kProducerRegs) / kConsumers / 8 * 8;
  static constexpr uint32_t kConsumerRegs = kConsumerRegsRaw > 240 ? 240 : kConsumerRegsRaw;

  static_assert(kBN % 8 == 0 && kBTileBytes % 1024 == 0, "token tile must be whole 8-row swizzle atoms");
  static_assert(layout::kUnitGroup % kConsumers == 0, "a CTA's units of one K chunk must be one contiguous copy");
  static_assert(kWeightStageBytes % 16 == 0 && kOffStaging % 16 == 0, "bulk copies need 16-byte alignment");
  static_assert(kSmemBytes <= 232448 / kCtasPerSm, "shared memory budget per CTA exceeded");
  static_assert(kCtasPerSm == 1 || kThreads * kCtasPerSm <= 2048, "too many threads per SM");
  static_assert(!kUseSetmaxnreg ||
                    kConsumers * (kConsumerRegs - kLaunchRegs) <= kLaunchRegs - kProducerRegs,
                "setmaxnreg: the consumers ask for more registers than the producer gives back");
  static_assert(!kUseSetmaxnreg || (kProducerRegs <= kLaunchRegs && kConsumerRegs >= kLaunchRegs),
                "setmaxnreg split must shrink the producer and grow the consumers");
  // (The descriptor arithmetic of consume_tile needs shared addresses below 2^18: sm90 has 228 KB.)
  static_assert(kSmemBytes <= 232448, "sm90 shared memory per CTA");
#if FP4MOE_TRACE
  // (TraceCta's static word and the GEMMs' sums, trace_consumer_acc[8][6].)
  static_assert(kSmemBytes + 16 + 384 <= 232448, "trace builds: the trace's static shared memory must fit too");
#endif
  static_assert(kBN <= kMaxTileTokens, "the workspace's rows_cap slack must cover a full-tile activation copy");
};

// The four bf16x2 A registers of one k16 step from its 32-bit code word (layout in weight_layout.h)
// and the pair {S(r0), S(r1)} of its rows' prescaled scales: code * 2^-126 via bit placement, times
// scale * 2^119 (exact); registers 0 and 2 are row r0's, 1 and 3 row r1's.
__device__ __forceinline__ void decode_k16(uint32_t w, uint32_t s_pair, uint32_t (&a)[4]) {
  a[0] = bf16x2_mul_half<0>(layout::fragment_bits(w, 0), s_pair);
  a[1] = bf16x2_mul_half<1>(layout::fragment_bits(w, 1), s_pair);
  a[2] = bf16x2_mul_half<0>(layout::fragment_bits(w, 2), s_pair);
  a[3] = bf16x2_mul_half<1>(layout::fragment_bits(w, 3), s_pair);
}

template <class T>
__device__ __forceinline__ int tile_bucket(int rows) {
  return T::kSmallN > 0 && rows <= T::kSmallN ? T::kSmallN : T::kBN;
}

// The token rows a tile's MMAs read: its bucket's wgmma N, narrowed as consume_tile narrows it
// (NarrowN). The producer copies only these rows of each K chunk: at decode a tile of at most 8
// tokens (m64n8k16) needs half of the 16-row token tile, 1 KB of a chunk's 10.2 KB. Rows from
// tc.rows up to that N come from the next rows in memory, rows past it keep what the slot held
// before: their columns are never stored.
template <class T>
__device__ __forceinline__ int tile_mma_rows(int rows) {
  auto narrowed = [rows](auto n_tag) {
    constexpr int n = decltype(n_tag)::value, a = NarrowN<n>::kA, b = NarrowN<n>::kB;
    return a > 0 && rows <= a ? a : b > 0 && rows <= b ? b : n;
  };
  if constexpr (T::kSmallN > 0) {
    if (rows <= T::kSmallN) return narrowed(std::integral_constant<int, T::kSmallN>{});
  }
  return narrowed(std::integral_constant<int, T::kBN>{});
}

}  // namespace fp4moe::sm90
