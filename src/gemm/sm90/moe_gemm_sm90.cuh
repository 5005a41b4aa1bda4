// sm_90a grouped MoE GEMMs over FP4 weights on wgmma, dequantized in registers.
//
// Computes, per routed token tile of one local expert, D = W x^T with the weights as the register A
// operand (64-row units, decoded from the unit-tiled layout of src/moe/weight_layout.h) and the
// tokens as the shared-memory B operand (the tiled, 128-byte-swizzled activations of
// src/moe/workspace.h), bf16 x bf16 -> fp32 on the tensor cores. GEMM1's epilogue applies alpha,
// bias and the activation (and NVFP4 fake quantization in w4a4 mode) and writes the tiled
// intermediate; GEMM2's applies alpha, bias and the router weight and writes y. Same contract and
// numerics as the SIMT kernels (src/gemm/simt/), checked against reference/moe_reference.cpp.
//
// Warp roles (warp-specialized, persistent): warpgroup 0 is the producer, one thread of which streams
// the tile's weight units and activation rows into shared-memory stages of one, two or four K chunks
// (64) with bulk async copies (one for the units of a chunk, which are contiguous, or of all of a
// stage's chunks; one per chunk for the activations); warpgroups 1..C are consumers, consumer c owning weight unit c of
// the tile.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // N = 48, 72, 80

#include <cstdint>
#include <utility>

#include "src/format/block_codec.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/ptx.cuh"
#include "src/common/pdl.h"
#include "src/routing/det_math.h"

// Bound experiments (CMakeLists.txt's FP4MOE_BOUND_EXPERIMENT; timing only, the results are wrong): the
// producer copies less than the MMAs read, which then read what the stage held before. 1-3 leave the
// direct GEMM1 (T=1) as it is: 1: the first half of each chunk's token rows (the bytes a 2-CTA
// cluster's multicast would leave each SM's copies); 2: the token rows at a unit's first stage only;
// 3: the weights at a unit's first stage only. 4, in every kernel: the weights of every stage from
// one small place (expert 0's first units, chunks ku % 8 onwards: at most 11 chunks' positions), so
// that they come from L2, never from DRAM.
#ifndef FP4MOE_BOUND_EXPERIMENT
#define FP4MOE_BOUND_EXPERIMENT 0
#endif

namespace fp4moe::sm90 {

namespace gmma = cute::SM90::GMMA;

// Releases a pipeline stage after this thread's reads of it: every consumer thread arrives (`empty`
// counts kConsumers * 128). An mbarrier arrive releases the arriving thread's own prior accesses
// only: one arrival per warp with no __syncwarp before it (the kernels until session 6) left the
// other lanes' reads formally unordered before the producer's next bulk copy into the stage. With a
// __syncwarp first it is correct by the PTX model, but compute-sanitizer's racecheck still reports
// lds against bulk_g2s on it, and nothing on this release (tests/test_pipeline_probe_gpu.cu).
__device__ __forceinline__ void release_stage(uint64_t* empty_bar) { mbar_arrive(empty_bar); }

// GEMM2 with MoeGemmParams::overlap (the scheduling thread for each unit it hands over, the producer
// for the CTA's first): waits until GEMM1 has counted `units` weight units of a token tile in
// (acquire), then orders those generic-proxy stores before the bulk copies (async proxy). After
// 2^26 polls (each an L2 round trip and a nanosleep of up to ~0.5 us: tens of seconds) the
// dependency is taken as broken: trap, a sticky CUDA error that ends the context, rather than a
// hang. (A counter, not clock64: the producer warpgroup runs on 24 registers; inline asm keeps
// ptxas from spilling around the loop.)
// Racecheck note: a token tile's bulk copy reads the rows its MMAs read (tile_mma_rows: whole 8-row
// blocks), past tc.rows into the next expert's rows, which GEMM1 may still be writing; those rows
// feed only output columns that the epilogue discards.
__device__ __forceinline__ void wait_gemm1_units(const int32_t* done, int32_t units) {
  asm volatile(
      "{\n"
      ".reg .pred more, late;\n"
      ".reg .b32 v, n;\n"
      "mov.b32 n, 0;\n"
      "WAIT_%=:\n"
      "ld.acquire.gpu.global.b32 v, [%0];\n"
      "setp.lt.s32 more, v, %1;\n"
      "@!more bra DONE_%=;\n"
      "nanosleep.u32 256;\n"
      "add.u32 n, n, 1;\n"
      "setp.gt.u32 late, n, 67108864;\n"
      "@late trap;\n"
      "bra WAIT_%=;\n"
      "DONE_%=:\n"
      "}\n" ::"l"(done),
      "r"(units)
      : "memory");
  fence_proxy_async_global();
}

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

// find_tile from the shared-memory copies of the plan's tables (Sm90Traits::kSharedTileTables):
// tables holds tile_start, counts and seg_start, kMaxLocalExperts + 1 words each. (No tail launch:
// those run 32-token tiles.)
__device__ __forceinline__ TileCoord find_tile_shared(const MoeGemmParams& p, const int32_t* tables, int64_t tile) {
  if (tile >= tables[p.num_local_experts]) return {-1, 0, 0};
  const int e = tile_expert(p, tables, tile);
  const int32_t within = int32_t(tile - tables[e]);
  const int32_t rows = tables[kMaxLocalExperts + 1 + e] - within * p.tile_tokens;
  const int32_t row0 = tables[2 * (kMaxLocalExperts + 1) + e] + within * p.tile_tokens;
  return {e, row0, rows < p.tile_tokens ? rows : p.tile_tokens};
}

// Shared-memory pipeline position, carried across tiles.
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance(int num_stages) {
    if (++stage == num_stages) stage = 0, phase ^= 1;
  }
};

struct ConsumerCtx {
  uint8_t* smem;
  uint64_t* full;
  uint64_t* empty;
  layout::ScaleCodec scale_codec;
  uint8_t* staging;
  float* row_weight;
  int c, tid, warp, lane, r0;
  int64_t k_units;  // K chunks of this work unit (all of K, or one split-K range)
  // Split-K (BN16 only): the tile's index, this unit's range and the number of ranges.
  int64_t tile;
  int split, split_index;
  // GEMM2 over canonical K ranges (kRanged): this call's range of the work unit's.
  int range, ranges;
  int token_tile;  // the plan's token tile of this work unit (GEMM1 with overlap counts in tile_done)
  // Trace builds: thread 0's running sums, in shared memory, of its waits for full stages [0], of its
  // time in K loops [1], of its time from a tile's start to its K loop [2], finding tiles [3] (with
  // the tile hand-off: the wait for the tile's first stage and reading its slot), in
  // whole tiles [4] and of the tiles [5] (added to the trace words once at the end: an atomic per
  // stage slowed the traced decode by ~16%).
  FP4MOE_TRACE_ONLY(unsigned long long* trace_acc;)
};

// One tile of one consumer warpgroup with a wgmma N of kN: the K loop and the epilogue. kRanged:
// GEMM2 sums K in canonical ranges (k_range_chunks, workspace.h).
template <class T, int kN, bool kDirect, bool kRanged>
__device__ __forceinline__ void consume_tile(const MoeGemmParams& p, const ConsumerCtx& x, const TileCoord& tc,
                                             int mu, bool active, PipeState& ps) {
  FP4MOE_TRACE_ONLY(const long long tile_from = clock64();)
  constexpr int kAcc = kN / 2;
  float acc[kAcc];  // started by the tile's first MMA (scale_d = Zero), never zeroed by hand
  // A fragments. Double-buffered (Sm90Traits::kDoubleBuffer): chunk ku decodes into a[ku % 2] while
  // chunk ku - 1's MMAs, which read a[(ku - 1) % 2] asynchronously, still run, so a warpgroup
  // overlaps its own decode and MMAs. Single-buffered: before a chunk overwrites the fragments, the
  // previous chunk's MMAs must be done, and decode overlaps only other warpgroups' MMAs. ptxas
  // (scripts/ptxas-check.sh) accepted double buffering for N <= 48 with 4 consumers (112 registers)
  // and N >= 128 with 2 (232); N = 64 serialized (4 consumers) or spilled (2), so a double-buffered
  // config single-buffers its N = 64 bucket (N = 96 with 4 consumers serialized too: BN96 is built
  // single-buffered). Buffers are indexed with compile-time constants only, so
  // they stay in registers.
  constexpr int kBufs = T::kDoubleBuffer && kN != 64 ? 2 : 1;
  // A tile with few tokens runs a narrower wgmma (NarrowN; at DeepSeek-R1 T <= 128 under uniform
  // routing nearly every BN16 tile has at most 8 tokens and runs m64n8k16). Warpgroup-uniform and
  // fixed over the tile; the branch makes ptxas inject warpgroup arrives (C7519, no serialization).
  constexpr int kNa = NarrowN<kN>::kA, kNb = NarrowN<kN>::kB;
  const bool narrow_a = kNa > 0 && tc.rows <= kNa, narrow_b = kNb > 0 && tc.rows <= kNb;
  uint32_t a[kBufs][4][4];
  int prev_stage = T::kStages;  // the sink barrier: no previous stage yet
  // Per-thread addresses and the stage-0 descriptor, computed once: inside the K loop only the stage
  // offset changes (the loop is issue-bound in decode, every instruction counts).
  // (opaque_u32: ptxas would otherwise recompute them from the thread index in every iteration.)
  const uint32_t w_base = smem_addr(x.smem + T::kOffW + x.c * layout::kUnitBytes);
  const uint32_t my_codes = opaque_u32(w_base + x.tid * 16);
  const uint32_t my_scales = opaque_u32(w_base + layout::kUnitCodeBytes + (x.tid / 4) * 8);
  const uint64_t desc_stage0 = opaque_u64(smem_desc_k128(smem_addr(x.smem + T::kOffB)));
  // chunk(buffer, c): the K chunk in slot c of the current stage; the stage's barrier is waited on at
  // c = 0, and it is left after its last chunk.
  // first: this is the tile's first chunk, whose first MMA starts the sum (scale_d = Zero). Only the
  // first chunk of a stage can be, so the others' MMAs never test it (a runtime flag kept across
  // chunks cost three instructions a chunk; peeling the first pair out of the loop instead ran ptxas
  // out of registers, C7512).
  // live: the warpgroup has a weight unit in this tile; without one it only waits and releases the
  // stages. A compile-time copy of the loop for each (no branch on it per chunk), except for BN16,
  // where the second copy made ptxas spill: there it stays a runtime test.
  auto chunk = [&](auto buf_tag, auto slot_tag, auto live, bool first) {
    constexpr int buf = decltype(buf_tag)::value;
    constexpr int c = decltype(slot_tag)::value;
    if constexpr (c == 0) {
      FP4MOE_TRACE_ONLY(const long long wait_from = clock64();)
      mbar_wait(&x.full[ps.stage], ps.phase);
      FP4MOE_TRACE_ONLY(if (x.tid == 0) x.trace_acc[0] += (unsigned long long)(clock64() - wait_from);)
    }
    if (live) {
      // The stage's offset times a constant plus the chunk's constant: the chunk-1 loads and
      // descriptors then reuse chunk 0's registers with immediate offsets.
      const uint32_t w_off = uint32_t(ps.stage) * (T::kChunks * T::kWeightStageBytes) + c * T::kWeightStageBytes;
      const uint4 codes = lds_u32x4(my_codes + w_off);
      const uint2 sc = lds_u32x2(my_scales + w_off);  // scale codes of k16 steps 0-1 and 2-3
      const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
      if constexpr (kBufs == 1) {
        cute::warpgroup_wait<0>();  // the previous chunk's MMAs no longer read the fragments
        fence_fragments(a[buf]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
        decode_k16(words[j], layout::scale_pair_bits(j < 2 ? sc.x : sc.y, j, x.scale_codec), a[buf][j]);
      fence_fragments(a[buf]);
      fence_accumulators(acc);
      cute::warpgroup_arrive();
      // The descriptor's start-address field (bits 0-13: address >> 4) of slot s, k16 step j is the
      // slot-0 field plus (s * kBTileBytes + 32 j) >> 4; shared memory is below 2^18 bytes, so the
      // field never carries into the next one.
      const uint64_t desc = desc_stage0 + uint64_t(uint32_t(ps.stage) * (T::kChunks * T::kBTileBytes / 16)) +
                            uint64_t(c * T::kBTileBytes / 16);
      // The k16 steps' MMAs with wgmma N = n into the first n / 2 accumulators, committed as one group
      // inside each arm of the branch below: a commit after the arms' join became a no-op HGMMA that
      // committed a second group per chunk, so that warpgroup_wait<1> waited for the chunk's own MMAs.
      auto mmas = [&](auto n_tag) {
        constexpr int n = decltype(n_tag)::value;
        float(&acc_n)[n / 2] = *reinterpret_cast<float(*)[n / 2]>(&acc[0]);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma_rs<typename RsMma<n>::Op>(a[buf][j], desc + uint64_t(2 * j), acc_n,
                                        (j == 0 && first) ? gmma::ScaleOut::Zero : gmma::ScaleOut::One,
                                        std::make_index_sequence<n / 2>{});
        cute::warpgroup_commit_batch();
      };
      // (The accumulators beyond a narrower n, uninitialized for such a tile, never reach an output:
      // split-K sums them but the epilogues skip the tokens the tile does not have.)
      // (narrow_a / narrow_b are constant false where NarrowN has no such N: kN stands in unused.)
      if (narrow_a) mmas(std::integral_constant<int, (kNa > 0 ? kNa : kN)>{});
      else if (narrow_b) mmas(std::integral_constant<int, (kNb > 0 ? kNb : kN)>{});
      else mmas(std::integral_constant<int, kN>{});
      fence_accumulators(acc);
      if constexpr (kBufs == 2) {
        cute::warpgroup_wait<1>();    // the previous chunk's MMAs are done ...
        fence_fragments(a[buf ^ 1]);  // ... so its fragments may be overwritten next
      }
    }
    if constexpr (c == 0) {
      // The previous stage (or the sink): the MMAs of its last chunk completed at the wait above.
      release_stage(&x.empty[prev_stage]);
      prev_stage = ps.stage;
    }
    if constexpr (c == T::kChunks - 1) ps.advance(T::kStages);
  };
  using C0 = std::integral_constant<int, 0>;
  using Odd = std::integral_constant<int, kBufs - 1>;         // fragment buffer of odd chunks
  using Slot1 = std::integral_constant<int, T::kChunks - 1>;  // slot of odd chunks (kChunks <= 2)
  // The epilogue's operands from global memory (alpha, the biases and GEMM2's router weights of the
  // tile's rows), loaded before the K loop: at the epilogue their latency was exposed, with no MMA
  // running (a router weight took two dependent loads then; the permute's row_weight makes it one).
  float pre_alpha = 0.0f, pre_bias0 = 0.0f, pre_bias1 = 0.0f, pre_weight = 0.0f;
  if (active) {
    if constexpr (T::kGemm1) {
      pre_alpha = p.alpha1[tc.expert];
      if (p.w13_bias) {
        const int64_t i = int64_t(mu) * layout::kIntermediatePerUnit + 8 * x.warp + x.lane / 4;
        pre_bias0 = p.w13_bias[int64_t(tc.expert) * 2 * p.inter_local + i];                   // gate
        pre_bias1 = p.w13_bias[int64_t(tc.expert) * 2 * p.inter_local + p.inter_local + i];   // up
      }
    } else {
      pre_alpha = p.alpha2[tc.expert];
      const int64_t f0 = int64_t(mu) * layout::kUnitRows + x.r0;
      if (p.w2_bias) {
        if (f0 < p.hidden) pre_bias0 = p.w2_bias[int64_t(tc.expert) * p.hidden + f0];
        if (f0 + 8 < p.hidden) pre_bias1 = p.w2_bias[int64_t(tc.expert) * p.hidden + f0 + 8];
      }
      if constexpr (kN <= 128) {  // one row a thread (wider tiles load theirs in the epilogue)
        if (x.tid < kN && x.tid < tc.rows)
          pre_weight = p.weight_on_input ? 1.0f : __ldcg(&p.ws.row_weight[tc.row0 + x.tid]);
      }
    }
  }
  const int k_units = int(x.k_units);  // this unit's chunks
  auto k_loop = [&](auto live) {
    int ku = 0;
    if constexpr (T::kChunks == 4) {
      // Four chunks a stage (the barrier wait, the release and the stage arithmetic once per four),
      // the fragment buffers alternating by chunk parity; a last stage may hold 1-3 chunks.
      using S1 = std::integral_constant<int, 1>;
      using S2 = std::integral_constant<int, 2>;
      using S3 = std::integral_constant<int, 3>;
      // (One copy of each slot's chunk: a separate tail copy ran ptxas out of registers, C7511.)
      for (; ku < k_units; ku += 4) {
        chunk(C0{}, C0{}, live, ku == 0);
        if (ku + 1 < k_units) chunk(Odd{}, S1{}, live, false);
        if (ku + 2 < k_units) chunk(C0{}, S2{}, live, false);
        if (ku + 3 < k_units) chunk(Odd{}, S3{}, live, false);
        else ps.advance(T::kStages);  // a last stage of 1-3 chunks
      }
    } else if constexpr (kBufs == 2 || T::kChunks == 2) {
      for (; ku + 1 < k_units; ku += 2) {
        chunk(C0{}, C0{}, live, ku == 0);
        chunk(Odd{}, Slot1{}, live, false);
      }
      if (ku < k_units) {
        chunk(C0{}, C0{}, live, ku == 0);
        if constexpr (T::kChunks == 2) ps.advance(T::kStages);  // a stage with one chunk (odd k_units)
      }
    } else {
      for (; ku < k_units; ++ku) chunk(C0{}, C0{}, live, ku == 0);
    }
  };
  FP4MOE_TRACE_ONLY(const long long k_loop_from = clock64();
                    if (x.tid == 0) x.trace_acc[2] += (unsigned long long)(k_loop_from - tile_from);)
  if constexpr (T::kBN == 16) k_loop(active);
  else if (active) k_loop(std::true_type{});
  else k_loop(std::false_type{});
  // Unconditional (also for inactive warpgroups, which issued nothing): a wait under a branch made
  // ptxas insert its own waits (C7517). The fences keep the epilogue's accumulator reads after it.
  cute::warpgroup_wait<0>();
#pragma unroll
  for (int b = 0; b < kBufs; ++b) fence_fragments(a[b]);
  fence_accumulators(acc);
  release_stage(&x.empty[prev_stage]);
  FP4MOE_TRACE_ONLY(if (x.tid == 0) x.trace_acc[1] += (unsigned long long)(clock64() - k_loop_from);)
  if (!active) return;

  // ---- GEMM2 over canonical K ranges, unsplit: the running total -----------------------------------
  // The consumers run such a work unit one range at a time (x.range of x.ranges, each a call with
  // this K loop, whose first MMA starts the range's sum from zero: moe_gemm_sm90_kernel). Each
  // range's sum goes to the running total in this CTA's slot, [accumulator / 4][consumer
  // thread][4] (a warp's 16-byte pieces adjacent): range 0's stored, each later one but the last
  // added in L2 by a reduction (red_add_f32x4, which the thread does not wait for: the next range's
  // MMAs run while L2 adds; with a load, add and store here instead Mixtral's prefill was 2-5%
  // slower, session 25), the last one's added to the loaded total here (add_rn_ftz, the same add:
  // this thread's own reductions are in) and the epilogue follows. The split-K fixup below adds a
  // split's partials (one range each) in the same order with the same add, so a split at the
  // ranges gives the same bits. (Through L2: a slot is another SM's in another launch.) A loop over
  // the ranges around the K loop instead cost the BN16 K loops 29-33 instructions of 400 (ptxas
  // moved each wgmma's descriptor into other uniform registers).
  if constexpr (kRanged) {
    static_assert(!T::kGemm1, "K ranges: GEMM2 only");
    static_assert(T::kConsumers * 128 * kAcc <= kRangeSlotFloats, "K ranges: slot too small");
    static_assert(kAcc % 4 == 0, "K ranges: 16-byte pieces");
    if (x.ranges > 1) {
      // (A tail launch reuses the main launch's slots: it starts its tiles after that one completed.)
      float* const total = p.ws.range_total + int64_t(blockIdx.x) * kRangeSlotFloats + (x.c * 128 + x.tid) * 4;
      constexpr int kStride = T::kConsumers * 128 * 4;
      if (x.range == 0) {
#pragma unroll
        for (int i = 0; i < kAcc; i += 4)
          __stcg(reinterpret_cast<float4*>(total + (i / 4) * kStride),
                 make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
        return;
      }
      if (x.range + 1 < x.ranges) {
#pragma unroll
        for (int i = 0; i < kAcc; i += 4)
          red_add_f32x4(total + (i / 4) * kStride, acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
        return;
      }
      if constexpr (T::kBN >= 80) {
        // The wide configs (all their N buckets) load the total in 16-byte pieces, four at a time (a
        // quarter of the loads); the narrow ones spilled with float4 loads (the ranged BN48 did). The
        // adds are the same.
#pragma unroll
        for (int b = 0; b < kAcc; b += 16) {
          float4 v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (b + 4 * j < kAcc) v[j] = __ldcg(reinterpret_cast<const float4*>(total + ((b + 4 * j) / 4) * kStride));
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (b + 4 * j < kAcc) {
              acc[b + 4 * j] = add_rn_ftz(v[j].x, acc[b + 4 * j]);
              acc[b + 4 * j + 1] = add_rn_ftz(v[j].y, acc[b + 4 * j + 1]);
              acc[b + 4 * j + 2] = add_rn_ftz(v[j].z, acc[b + 4 * j + 2]);
              acc[b + 4 * j + 3] = add_rn_ftz(v[j].w, acc[b + 4 * j + 3]);
            }
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[i] = add_rn_ftz(__ldcg(total + (i / 4) * kStride + i % 4), acc[i]);
      }
    }
  }

  // ---- Split-K: partial sums out, the tile's last unit sums them in range order --------------------
  if constexpr (T::kBN == 16) {
    if (x.split > 1) {
      static_assert(T::kConsumers * 128 * kAcc <= kSplitUnitFloats, "split-K partial slot too small");
      constexpr int kUnitSlot = T::kConsumers * 128 * kAcc;
      float* const part = p.ws.split_partial + x.c * 128 * kAcc + x.tid * kAcc;
      int32_t* const count = p.ws.split_count + (T::kGemm1 ? 0 : kSplitCounters) + x.tile * T::kConsumers + x.c;
      float* const mine = part + (x.tile * x.split + x.split_index) * kUnitSlot;
#pragma unroll
      for (int i = 0; i < kAcc; i += 4)
        *reinterpret_cast<float4*>(mine + i) = make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
      // No fence of each thread's own here: thread 0's arrival after the barrier releases the whole
      // warpgroup's partials (a release is cumulative: it orders the stores the barrier made it observe).
      const uint32_t bar = 1 + x.c;
      named_barrier_sync(bar, 128);
      int* const flag = reinterpret_cast<int*>(x.row_weight);  // this consumer's scratch word
      if (x.tid == 0) {
        // The arrival releases the warpgroup's partials (ordered before it by the barrier) and
        // acquires the other ranges' (their arrivals released them).
        const int arrived = atom_acq_rel_gpu_add(count, 1);
        *flag = arrived == x.split - 1;
      }
      named_barrier_sync(bar, 128);
      const bool last = *flag != 0;
      named_barrier_sync(bar, 128);  // everyone has read the flag before the epilogue reuses the word
      if (!last) return;
      // (No fence here either: thread 0's acquire, then the barrier, orders these loads of the other
      // units' partials after their arrivals.)
      for (int r = 0; r < x.split; ++r) {
        const float* src = part + (x.tile * x.split + r) * kUnitSlot;
#pragma unroll
        for (int i = 0; i < kAcc; i += 4) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(src + i));
          if (r == 0) {
            acc[i] = v.x, acc[i + 1] = v.y, acc[i + 2] = v.z, acc[i + 3] = v.w;
          } else if constexpr (kRanged) {  // the running total's add (above)
            acc[i] = add_rn_ftz(acc[i], v.x), acc[i + 1] = add_rn_ftz(acc[i + 1], v.y);
            acc[i + 2] = add_rn_ftz(acc[i + 2], v.z), acc[i + 3] = add_rn_ftz(acc[i + 3], v.w);
          } else {
            acc[i] += v.x, acc[i + 1] += v.y, acc[i + 2] += v.z, acc[i + 3] += v.w;
          }
        }
      }
    }
  }

  // ---- Epilogue -----------------------------------------------------------------------------------
  const int e = tc.expert;
  const uint32_t bar_id = 1 + x.c;
  const int tid = x.tid, lane = x.lane, warp = x.warp;
  if constexpr (T::kGemm1) {
    // Rows r0 / r0 + 8 are the gate / up rows of intermediate index i = 32 mu + 8 warp + lane / 4.
    float* stg = reinterpret_cast<float*>(x.staging);  // [BN][36] fp32
    const int ui = 8 * warp + lane / 4;
    const float alpha = pre_alpha, bias_gate = pre_bias0, bias_up = pre_bias1;
    // Direct GEMM1 with the overlap, once the warpgroup's stores are in (after a named barrier): this
    // unit of the token tile is in, and GEMM2 may read its rows. Thread 0's release (cumulative)
    // orders the warpgroup's stores before the count. (It waits for the plan first, which zeroes the
    // counts, long done by the end of a tile; the producer warpgroup's warp 2 lets GEMM2 be
    // scheduled once the plan is complete, in no order with this count.) The other GEMM1 kernels
    // count in the producer warpgroup (count_gemm1_units): a one-token forward has a single round
    // of tiles.
    auto count_direct_unit = [&]() {
      if (kDirect && p.overlap && tid == 0) {
        pdl_wait();
        red_release_gpu_add(&p.ws.tile_done[x.token_tile], 1);
      }
    };
    if constexpr (T::kBN == 16) {
      if (!p.w4a4) {
        // The 16-token tiles in w4a16 store from registers. Warp w holds intermediate columns
        // 32 mu + 8 w + j (j = lane / 4) of tokens 8 nb + 2 (lane % 4) (+1): an 8 x 8 block per nb,
        // each token's 8 columns one 16-byte piece of the tiled intermediate. Transposed in the warp
        // (movmatrix), lanes 4 n .. 4 n + 3 hold token n's piece, 4 bytes each: no staging, no
        // barrier. (w4a4 quantizes 16-column blocks, across two warps: the staging below.)
        char* const h = reinterpret_cast<char*>(p.ws.h);
        const int64_t k = int64_t(mu) * layout::kIntermediatePerUnit + 8 * warp;
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) {
          if (8 * nb >= tc.rows) break;
          float v[2];
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float gate = acc[4 * nb + hh] * alpha + bias_gate;
            const float up = acc[4 * nb + 2 + hh] * alpha + bias_up;
            v[hh] = activation_f32(p.activation, gate, up);
          }
          const uint32_t piece = movmatrix_trans(bf16x2_rn(v[0], v[1]));
          const int n = 8 * nb + lane / 4;
          if (n < tc.rows)
            *reinterpret_cast<uint32_t*>(h + tiled_offset_bytes(tc.row0 + n, k, p.layout.rows_cap) + 4 * (lane % 4)) =
                piece;
        }
        if (kDirect && p.overlap) named_barrier_sync(bar_id, 128);  // the stores before the count
        count_direct_unit();
        return;
      }
    }
#pragma unroll
    for (int nb = 0; nb < kN / 8; ++nb) {
      // (Columns past the tile's tokens are never stored: a decode tile of at most 8 tokens skips
      // the second half's activations. In the wide tiles the test made ptxas spill more.)
      if (T::kBN == 16 && 8 * nb >= tc.rows) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = 8 * nb + 2 * (lane % 4) + h;
        const float gate = acc[4 * nb + h] * alpha + bias_gate;
        const float up = acc[4 * nb + 2 + h] * alpha + bias_up;
        stg[n * 36 + ui] = activation_f32(p.activation, gate, up);
      }
    }
    named_barrier_sync(bar_id, 128);
    for (int task = tid; task < kN * 2; task += 128) {
      const int n = task / 2, blk = task % 2;
      if (n >= tc.rows) continue;
      float v[16];
      const float4* src = reinterpret_cast<const float4*>(stg + n * 36 + 16 * blk);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = src[q];
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
      if (p.w4a4) detail::fake_quantize_nvfp4_block_kernel(v, p.a2_gs[e]);
      uint32_t packed_bf16[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) packed_bf16[q] = bf16x2_rn(v[2 * q], v[2 * q + 1]);
      const int64_t k = int64_t(mu) * layout::kIntermediatePerUnit + 16 * blk;
      char* h = reinterpret_cast<char*>(p.ws.h);
      *reinterpret_cast<uint4*>(h + tiled_offset_bytes(tc.row0 + n, k, p.layout.rows_cap)) =
          make_uint4(packed_bf16[0], packed_bf16[1], packed_bf16[2], packed_bf16[3]);
      *reinterpret_cast<uint4*>(h + tiled_offset_bytes(tc.row0 + n, k + 8, p.layout.rows_cap)) =
          make_uint4(packed_bf16[4], packed_bf16[5], packed_bf16[6], packed_bf16[7]);
    }
    named_barrier_sync(bar_id, 128);  // staging is reused by the next tile (and the stores are in)
    count_direct_unit();
  } else {
    // Rows r0 / r0 + 8 are output features 64 mu + r0 (+8); columns are the tile's tokens.
    uint16_t* stg = reinterpret_cast<uint16_t*>(x.staging);  // [BN][72] bf16
    if constexpr (kN <= 128) {
      if (tid < kN) x.row_weight[tid] = pre_weight;
    } else {
      for (int n = tid; n < kN; n += 128) {  // kN exceeds the warpgroup's 128 threads
        float wv = 0.0f;
        if (n < tc.rows) wv = p.weight_on_input ? 1.0f : __ldcg(&p.ws.row_weight[tc.row0 + n]);
        x.row_weight[n] = wv;
      }
    }
    named_barrier_sync(bar_id, 128);
    const float alpha = pre_alpha, bias0 = pre_bias0, bias1 = pre_bias1;
    // The fragments go to the token-major staging transposed, four 8x8 blocks per stmatrix: block
    // (g, nb) holds unit rows 16 warp + 8 g + lane / 4 and tokens 8 nb + 2 (lane % 4) (+1); lane l
    // addresses token row 8 (nb + q / 2) + l % 8, rows 16 warp + 8 (q % 2) on, for q = l / 8.
    static_assert(kN % 16 == 0, "stmatrix blocks come in pairs of 8 tokens");
    const uint32_t stg_lane = smem_addr(stg) + uint32_t(((8 * (lane / 16) + lane % 8) * 72 + 16 * warp +
                                                         8 * ((lane / 8) % 2)) * 2);
#pragma unroll
    for (int nb = 0; nb < kN / 8; nb += 2) {
      uint32_t frag[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int b = nb + q / 2, g = q % 2;
        const int n = 8 * b + 2 * (lane % 4);
        const float2 wv = *reinterpret_cast<const float2*>(x.row_weight + n);
        const float bias = g ? bias1 : bias0;
        frag[q] = bf16x2_rn((acc[4 * b + 2 * g] * alpha + bias) * wv.x, (acc[4 * b + 2 * g + 1] * alpha + bias) * wv.y);
      }
      stmatrix_x4_trans(stg_lane + uint32_t(8 * nb * 72 * 2), frag[0], frag[1], frag[2], frag[3]);
    }
    named_barrier_sync(bar_id, 128);
    for (int task = tid; task < kN * 8; task += 128) {
      const int n = task / 8, q = task % 8;
      const int64_t col = int64_t(mu) * layout::kUnitRows + 8 * q;
      if (n >= tc.rows || col >= p.hidden) continue;
      *reinterpret_cast<uint4*>(p.ws.y + int64_t(tc.row0 + n) * p.hidden + col) =
          *reinterpret_cast<const uint4*>(stg + n * 72 + 8 * q);
    }
    named_barrier_sync(bar_id, 128);
  }
}

// Runs consume_tile with the wgmma N the tile's bucket asks for (kBN or kSmallN).
template <class T, bool kDirect, bool kRanged>
__device__ __forceinline__ void consume_bucketed(const MoeGemmParams& p, const ConsumerCtx& x, const TileCoord& tc,
                                                 int mu, bool active, int bucket, PipeState& ps) {
  if constexpr (T::kSmallN > 0) {
    if (bucket == T::kSmallN) return consume_tile<T, T::kSmallN, kDirect, kRanged>(p, x, tc, mu, active, ps);
  }
  consume_tile<T, T::kBN, kDirect, kRanged>(p, x, tc, mu, active, ps);
}

// Direct GEMM1 (MoeGemmParams::direct_ids): the tile table of a one-token forward, made from the
// routed ids in place, in tile_start's shared memory: word 0 the tiles, then for tile t its local
// expert, first row and rows at 1 + t, 1 + kMaxK + t and 1 + 2 kMaxK + t. As the plan makes them:
// ids out of range or of other shards get no row, each local expert of the token one tile of its
// count of the token's ids (more than one only for a repeated id), tiles in expert order, each
// expert's rows from the sum of the earlier experts' counts rounded up to 8. scratch: 3 kMaxK words.
// Called by every thread of the CTA (it synchronizes).
constexpr int kDirectMaxK = routing::kMaxTopK;
__device__ __forceinline__ void make_direct_table(const MoeGemmParams& p, int32_t* table, int32_t* scratch) {
  int32_t* const ids = scratch;                    // the token's ids
  int32_t* const count = scratch + kDirectMaxK;    // k's first occurrence of a local expert: its count, else 0
  int32_t* const local = scratch + 2 * kDirectMaxK;
  const int k = threadIdx.x;
  if (k < p.top_k) ids[k] = __ldcg(p.direct_ids + k);
  __syncthreads();
  if (k < p.top_k) {
    const int32_t id = ids[k];
    int e;
    bool first = is_local_expert(id, p.num_experts, p.expert_begin, p.num_local_experts, &e);
    int32_t n = 0;
    for (int j = 0; j < p.top_k; ++j) {
      n += ids[j] == id;
      first &= !(j < k && ids[j] == id);
    }
    count[k] = first ? n : 0;
    local[k] = e;
  }
  __syncthreads();
  if (k < p.top_k && count[k] > 0) {
    int32_t tile = 0, row0 = 0;
    for (int j = 0; j < p.top_k; ++j) {
      if (count[j] > 0 && local[j] < local[k]) tile += 1, row0 += segment_rows(count[j]);
    }
    table[1 + tile] = local[k];
    table[1 + kDirectMaxK + tile] = row0;
    table[1 + 2 * kDirectMaxK + tile] = count[k];
  }
  if (k == 0) {
    int32_t tiles = 0;
    for (int j = 0; j < p.top_k; ++j) tiles += count[j] > 0;
    table[0] = tiles;
  }
}

__device__ __forceinline__ TileCoord direct_tile(const int32_t* table, int64_t tile) {
  if (tile >= table[0]) return {-1, 0, 0};
  return {table[1 + tile], table[1 + kDirectMaxK + tile], table[1 + 2 * kDirectMaxK + tile]};
}

// GEMM1 with MoeGemmParams::overlap: the producer warpgroup's thread 32 counts the weight units of
// each of the CTA's tiles into tile_done once every consumer thread has arrived on `counted` (its
// epilogue done), then completes a phase of `counted + 1` (`free`), which each consumer thread
// waits for before its next arrival: neither barrier can run a phase ahead of its waiters. There is
// no split-K with the overlap, so a work unit is a tile; 32-bit, as launch_traits keeps the work
// below 2^31.
template <int kConsumers>
__device__ __forceinline__ void count_gemm1_units(int32_t* tile_done, FastDiv div_m_blocks, uint64_t* counted,
                                                  uint32_t tiles, uint32_t m_blocks, int m_units) {
  uint32_t phase = 0;
  for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint32_t token_tile = div_m_blocks.div(t);
    const int mb = int(t - token_tile * m_blocks);
    mbar_wait(counted, phase);
    red_release_gpu_add(&tile_done[token_tile], min(kConsumers, m_units - mb * kConsumers));
    mbar_arrive(counted + 1);
    phase ^= 1;
  }
}

// The dynamically scheduled kernels (Sm90Traits::kTileHandoff): the producer warpgroup's thread 32
// takes the CTA's work units after its first (blockIdx.x) from the GEMM's ws.next_unit, one ahead
// of the producer: it puts each in `slot` and completes a phase of `ready`, and waits for the
// producer's arrival on `taken` before the next; a unit past the last ends both. (An atomic in the
// producer thread itself waited for its round trip at once: ptxas makes a single thread's atomic
// add the warp-aggregated form, whose shuffle needs the result.) Only where blockIdx.x < num_work:
// the producer then takes every unit up to the first past the last, so that none is taken and left.
// prepare(u) runs for each unit before it is handed over, while the producer still copies the
// previous one (GEMM2 with the overlap: the wait for its intermediate rows).
template <class Prepare>
__device__ __forceinline__ void schedule_units(int32_t* next, uint32_t* slot, uint64_t* ready, uint64_t* taken,
                                               uint32_t num_work, Prepare&& prepare) {
  for (uint32_t phase = 0;; phase ^= 1) {
    mbar_wait(taken, phase ^ 1);  // (first: the CTA's own unit; the atomic after it: one unit ahead, not two)
    const uint32_t u = gridDim.x + uint32_t(atomicAdd(next, 1));
    if (u < num_work) prepare(u);
    *reinterpret_cast<volatile uint32_t*>(slot) = u;
    mbar_arrive(ready);  // (a release at CTA scope: the slot's store)
    if (u >= num_work) return;
  }
}

// kDirect: direct GEMM1 (MoeGemmParams::direct_ids; BN16 GEMM1 configs only): it reads nothing that
// the plan or the permute writes (the tile table from make_direct_table, the token's row straight
// from the hidden states), so it goes on at once. Each consumer warpgroup waits for them before it
// exits, so that GEMM1 still completes after them, as GEMM2 and the finalize assume (with the
// overlap the producer's warp 2 waits too, which makes that wait redundant but harmless). With the
// overlap, GEMM2 reads the plan's tables without waiting for GEMM1: each CTA lets it be scheduled
// only after such a wait, in that producer warp, while the K loop runs. Its own instantiation: a
// runtime flag for it made ptxas spill around the warp-role split.
// kRanged: GEMM2 over canonical K ranges (k_range_chunks, workspace.h): split at them (BN16, a work
// unit per range) or not (the consumers run a unit range by range, consume_tile adding up their
// sums). Instantiations of their own, so that the other kernels stay as they are (the ranges'
// start as a runtime choice cost the decode GEMM2 a spill).
template <class T, bool kDirect = false, bool kRanged = false>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm) moe_gemm_sm90_kernel(const MoeGemmParams p) {
  static_assert(!kDirect || (T::kGemm1 && T::kBN == 16 && !T::kRunsTails), "direct GEMM1: BN16 GEMM1 only");
  static_assert(!kRanged || !T::kGemm1, "K ranges: GEMM2 only");
  static_assert(!kDirect || (1 + 3 * kDirectMaxK) * 4 <= T::kOffTileInfo - T::kOffTileStart, "direct table");
  static_assert(!kDirect || 3 * kDirectMaxK * 4 <= T::kStagingBytes, "direct table scratch");
  static_assert(!kDirect || kDirectMaxK <= T::kBN, "direct GEMM1: one tile an expert (an id at most top_k times)");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kOffBars);
  uint64_t* empty = full + T::kStages;
  // GEMM1 with the overlap (count_gemm1_units): after the sink, `counted` and `free`. The dynamic
  // kernels' (schedule_units): `ready` and `taken` in their place.
  uint64_t* const counted = empty + T::kStages + 1;
  uint64_t* const count_free = counted + 1;
  int32_t* tile_start = reinterpret_cast<int32_t*>(smem + T::kOffTileStart);
  int4* const tile_info = reinterpret_cast<int4*>(smem + T::kOffTileInfo);
  FP4MOE_TRACE_CTA(p.ws.trace, T::kGemm1 ? (p.tail_of > 0 ? kTraceGemm1Tail : kTraceGemm1)
                                         : (p.tail_of > 0 ? kTraceGemm2Tail : kTraceGemm2));
  FP4MOE_TRACE_ONLY(
      unsigned long long* const trace_sums = FP4MOE_TRACE_SLOT();
      const long long trace_from = clock64();
      __shared__ unsigned long long trace_consumer_acc[8][6];
      unsigned long long trace_producer_wait = 0, trace_producer_setup = 0, trace_producer_issue = 0;
      unsigned long long trace_producer_lookup = 0, trace_producer_take = 0;)

  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);  // warp-uniform for ptxas
  const int tid = threadIdx.x % 128;
  // Prologue: independent of the previous kernel, so it overlaps it (programmatic dependent launch).
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], T::kConsumers * 128);  // one arrival per consumer thread
    }
    // The sink (Sm90Traits::kSmemBytes) takes whole warps' arrivals like the stages, so it counts the
    // same: a warp's 32 arrivals must never exceed the pending count.
    mbar_init(&empty[T::kStages], T::kConsumers * 128);
    if constexpr (T::kGemm1 && T::kOverlaps && !kDirect) {
      mbar_init(counted, T::kConsumers * 128);  // every consumer thread
      mbar_init(count_free, 1);                 // the signalling thread
    }
    if constexpr (T::kTileHandoff) {
      mbar_init(counted, 1);     // ready: the scheduling thread
      mbar_init(count_free, 1);  // taken: the producer
    }
    fence_barrier_init();
  }
  // With MoeGemmParams::overlap, GEMM1 waits for the permute (and through it the plan) and only then
  // lets GEMM2 be scheduled, so that GEMM2, which does not wait on GEMM1 as a whole, starts after the
  // plan and the permute are complete: it reads the plan's tables and the router weights through L2
  // (ld.cg), and each token tile's intermediate rows once GEMM1 has counted all its units of that
  // tile in (tile_done). On the SMs that GEMM1's last, partial round leaves idle, GEMM2 starts
  // early. (GEMM1 triggers after it has read the plan's table: nothing later waits for GEMM1 as a
  // whole, so a CTA with no tile must not read it after the next forward may have begun.)
  // A hardware assumption, not a PTX guarantee: the PTX model makes a predecessor's writes visible
  // to a grid that executes griddepcontrol.wait, and GEMM2 does not. It reads what the plan and the
  // permute wrote only after they completed (before GEMM1's wait returned, and GEMM1 triggers after
  // it) and only through L2 (ld.cg, ld.acquire, bulk copies), never through L1.
  // GEMM2's main launch without the overlap lets its dependent (its tail launch or the finalize) be
  // scheduled only after its wait, so that everything after it starts after the plan is complete:
  // the finalize reads the plan's pair_row before its own wait (through L2, the same hardware
  // assumption as above). A tail launch starts after that already and triggers early.
  if constexpr (kDirect) {
    // (The table's scratch: the staging of the epilogues, unused until then.)
    make_direct_table(p, tile_start, reinterpret_cast<int32_t*>(smem + T::kOffStaging));
    if (!p.overlap) pdl_launch_dependents();  // (with the overlap, after a wait: the producer's warp 2)
    FP4MOE_TRACE_WAITED();  // (no wait here: the trace's "waited" is when the table is ready)
  } else {
    if (!(T::kOverlaps && p.overlap)) {
      const bool trigger_after_wait = !T::kGemm1 && p.tail_of == 0;
      if (!trigger_after_wait) pdl_launch_dependents();
      pdl_wait();  // the permuted activations (GEMM1) or the intermediate (GEMM2), and the plan
      FP4MOE_TRACE_WAITED();
      if (trigger_after_wait) pdl_launch_dependents();
    } else if constexpr (T::kGemm1) {
      pdl_wait();
      FP4MOE_TRACE_WAITED();
    } else {
      pdl_launch_dependents();
    }
    const int32_t* plan_tiles = T::kRunsTails && p.tail_of > 0 ? p.ws.tail_start : p.ws.tile_start;
    // One loop that loads a thread's words before it stores any: with a loop per table, ptxas
    // issued the second loop's loads after the first loop's stores (two round trips to L2). (counts
    // and seg_start have num_local_experts + 1 words too: the last ones are copied, never read.)
    static_assert(!T::kSharedTileTables || !T::kRunsTails, "find_tile_shared has no tail launch");
    for (int i = threadIdx.x; i <= p.num_local_experts; i += blockDim.x) {
      const int32_t tiles = __ldcg(&plan_tiles[i]);
      if constexpr (T::kSharedTileTables) {
        const int32_t count = __ldcg(&p.ws.counts[i]), seg = __ldcg(&p.ws.seg_start[i]);
        tile_start[kMaxLocalExperts + 1 + i] = count;
        tile_start[2 * (kMaxLocalExperts + 1) + i] = seg;
      }
      tile_start[i] = tiles;
    }
  }
  __syncthreads();
  if constexpr (T::kGemm1 && T::kOverlaps && !kDirect) {
    if (p.overlap) pdl_launch_dependents();
  }

  const layout::GemmWeightShape g = T::kGemm1 ? p.g1 : p.g2;
  const int64_t k_units = g.k_units();
  const int m_units = int(g.m_units());
  const int m_blocks = (m_units + T::kConsumers - 1) / T::kConsumers;
  const int64_t num_tiles = int64_t(kDirect ? tile_start[0] : tile_start[p.num_local_experts]) * m_blocks;
  // Split-K (BN16 only; the host keeps num_tiles * split <= kMaxSplitUnits): work unit w is range
  // w % split of tile w / split, chunks [r * k_units / split, (r + 1) * k_units / split), or for a
  // GEMM2 split at its canonical K ranges (kRanged) range r, chunks [r * p.k_range_chunks,
  // min((r + 1) * p.k_range_chunks, k_units)), each unit one range, whose K loop sums it from zero.
  // (32-bit: 64-bit arithmetic here cost the BN16 K loop 8 instructions, uniform-register moves.)
  // (select_split_k, also keeping split <= k_units / 4, and select_range_split keep num_tiles * split
  // <= kMaxSplitUnits for every routing; launch_traits refuses a split past k_units. Re-checking here
  // made ptxas spill the BN16 kernels.)
  const int split = T::kBN == 16 ? (T::kGemm1 ? p.split_k1 : p.split_k2) : 1;
  const int64_t num_work = num_tiles * split;
  auto k_begin = [&](uint32_t r) {
    if constexpr (kRanged) return int64_t(min(r * uint32_t(p.k_range_chunks), uint32_t(k_units)));
    else return int64_t(p.div_split.div(r * uint32_t(k_units)));
  };
  // GEMM2 skips the split's division when unsplit (every default forward): at decode its tiles are
  // short (32 K chunks at DeepSeek-R1) and a tile's setup a visible share. (In GEMM1 the branch cost
  // its BN16 K loop an instruction: it keeps the division, a multiply-high since FastDiv.)
  const bool unsplit = !T::kGemm1 && split == 1;
  // GEMM2's decode and small kernels and the wide-tile kernels (kTileHandoff) take their work units
  // dynamically: each CTA its first by blockIdx.x, then the next from a counter (ws.next_unit,
  // zeroed by the plan; schedule_units), so that the SMs GEMM1 leaves first (with the overlap) take
  // more of GEMM2's units. The producer hands each unit to the consumers with its tile (tile_info),
  // then unit -1.
  constexpr bool dynamic = T::kTileHandoff;
  // Work unit w's tile, and a token tile's expert and rows, as the producer derives them and the
  // consumers too where the producer does not hand them over (Sm90Traits::kTileHandoff) (32-bit
  // with the launch's divisors: launch_traits keeps the work below 2^31).
  auto tile_of = [&](int64_t w) { return unsplit ? uint32_t(w) : p.div_split.div(uint32_t(w)); };
  auto coord_of = [&](int32_t token_tile) {
    return kDirect                  ? direct_tile(tile_start, token_tile)
           : T::kSharedTileTables ? find_tile_shared(p, tile_start, token_tile)
                                  : find_tile<T::kRunsTails>(p, tile_start, token_tile);
  };
  // Where work unit w lies, as the producer and GEMM2's L2 prefetch (warp 2) take it: its K chunks
  // [k0, k1) (its range when split), its token tile and the tile's block of m units.
  struct UnitPlace {
    int64_t k0, k1;
    int32_t token_tile;
    int mb;
  };
  auto place_of = [&](uint32_t w) {
    const uint32_t t = tile_of(w);
    const uint32_t r = w - t * uint32_t(split);  // this unit's K range
    const int32_t token_tile = int32_t(p.div_m_blocks.div(t));
    return UnitPlace{unsplit ? 0 : k_begin(r), unsplit ? k_units : k_begin(r + 1), token_tile,
                     int(t - uint32_t(token_tile) * uint32_t(m_blocks))};
  };

  if (wg == 0) {
    // ---- Producer --------------------------------------------------------------------------------
    if constexpr (T::kUseSetmaxnreg) regs_decrease<T::kProducerRegs>();
    if constexpr (T::kGemm1 && T::kOverlaps && !kDirect) {
      // With the overlap, thread 32 counts the finished weight units into tile_done for GEMM2
      // (count_gemm1_units), off the consumers' path: a gpu-scope release waits until the
      // epilogue's stores are visible, and the whole consumer warpgroup stood still while its thread
      // 0 released (4-6% of the layer at Qwen3-30B and gpt-oss-20b T = 8-16, session 21). Every
      // consumer thread arrives on `counted` after its epilogue (a CTA-scope release of its
      // stores); thread 32 acquires that and releases at gpu scope, which is cumulative: it orders
      // the stores it observed. (The role by a warp-uniform test: by thread index alone, ptxas
      // spilled the producer's stage loop.)
      if (__shfl_sync(0xffffffffu, tid / 32, 0) == 1) {
        if (tid == 32 && p.overlap)
          count_gemm1_units<T::kConsumers>(p.ws.tile_done, p.div_m_blocks, counted,
                                           uint32_t(num_work), uint32_t(m_blocks), m_units);
        return;
      }
    }
    if constexpr (dynamic) {
      if (__shfl_sync(0xffffffffu, tid / 32, 0) == 1) {
        if (tid == 32 && blockIdx.x < num_work) {
          // GEMM2 with the overlap: each unit's wait for GEMM1's units of its token tile here, off the
          // producer's path (the producer waits only for the CTA's first unit itself).
          int32_t ready_tile = -1;
          schedule_units(p.ws.next_unit + (T::kGemm1 ? 1 : 0), reinterpret_cast<uint32_t*>(smem + T::kOffNextUnit),
                         counted, count_free, uint32_t(num_work), [&](uint32_t u) {
                           if constexpr (!T::kGemm1 && T::kOverlaps) {
                             const int32_t token_tile = int32_t(p.div_m_blocks.div(tile_of(u)));
                             if (p.overlap && token_tile != ready_tile) {
                               ready_tile = token_tile;
                               wait_gemm1_units(p.ws.tile_done + token_tile, int32_t(p.g1.m_units()));
                             }
                           }
                         });
        }
        return;
      }
    }
    if constexpr (kDirect) {
      // Direct GEMM1 with the overlap: warp 2 waits for the plan (which zeroes tile_done) and then lets
      // GEMM2 be scheduled while the tile's K loop runs, so that GEMM2's CTAs on the SMs GEMM1 leaves
      // idle start early and bring their first weights into L2 (below). (Warp 1 is idle here: direct
      // GEMM1 neither counts its units nor takes dynamic ones.)
      if (__shfl_sync(0xffffffffu, tid / 32, 0) == 2) {
        if (tid == 64 && p.overlap) {
          pdl_wait();
          pdl_launch_dependents();
        }
        return;
      }
    }
    if constexpr (!T::kGemm1 && T::kOverlaps && !(kRanged && T::kBN != 16)) {
      // GEMM2 with the overlap: while the CTA's first unit waits for GEMM1's units of its token tile,
      // warp 2 brings the unit's first weights (as many chunks as the stages hold) from DRAM into L2,
      // since they do not depend on GEMM1; the producer's copies then read them from L2. Only for the
      // first unit (a CTA started before GEMM1 ended), and only while its token tile is not complete.
      // (Not in the ranged BN32 kernel, whose K loop it lengthened by 8 instructions; its effect
      // there was not measured.)
      if (__shfl_sync(0xffffffffu, tid / 32, 0) == 2) {
        if (tid == 64 && p.overlap && blockIdx.x < num_work) {
          const UnitPlace u = place_of(blockIdx.x);
          const TileCoord tc = coord_of(u.token_tile);
          const int mu0 = u.mb * T::kConsumers;
          const uint32_t bytes = uint32_t(min(T::kConsumers, m_units - mu0)) * layout::kUnitBytes;
          const int64_t k_end = min(u.k1, u.k0 + T::kStages * T::kChunks);  // (not past the unit's range)
          if (__ldcg(p.ws.tile_done + u.token_tile) < int32_t(p.g1.m_units()))
            for (int64_t ku = u.k0; ku < k_end; ++ku)
              bulk_prefetch_l2(p.w2 + g.unit_offset(tc.expert, mu0, ku), bytes);
        }
        return;
      }
    }
    if (tid != 0) return;
    const uint8_t* weights = T::kGemm1 ? p.w13 : p.w2;
    const uint8_t* act = reinterpret_cast<const uint8_t*>(T::kGemm1 ? p.ws.x : p.ws.h);
    const uint64_t pol_weights = policy_evict_first();
    const uint64_t pol_act = policy_evict_last();
    PipeState ps;
    // The next unit from schedule_units (dynamic). The shuffle keeps it warp-uniform for ptxas: a
    // unit in a plain register moved the producer's tile arithmetic out of uniform registers, and it
    // spilled.
    auto take_unit = [&](uint32_t& phase) {
      FP4MOE_TRACE_ONLY(const long long take_from = clock64();)
      mbar_wait(counted, phase);
      const uint32_t u = *reinterpret_cast<volatile uint32_t*>(smem + T::kOffNextUnit);
      mbar_arrive(count_free);
      phase ^= 1;
      FP4MOE_TRACE_ONLY(trace_producer_take += (unsigned long long)(clock64() - take_from);)
      return __shfl_sync(1u, u, 0);
    };
    int32_t ready_tile = -1;  // GEMM2 with overlap: the token tile whose intermediate rows are in
    uint32_t sched_phase = 0;  // (dynamic: `ready`'s phase)
    for (uint32_t w = blockIdx.x; w < uint32_t(num_work); w = dynamic ? take_unit(sched_phase) : w + gridDim.x) {
      FP4MOE_TRACE_ONLY(const long long setup_from = clock64();)
      const auto [k0, k1, token_tile, mb] = place_of(w);
      const TileCoord tc = coord_of(token_tile);
      FP4MOE_TRACE_ONLY(if (tc.rows >= 0) trace_producer_lookup += (unsigned long long)(clock64() - setup_from);)
      if constexpr (!T::kGemm1 && T::kOverlaps) {
        if (p.overlap) {
          // A unit from schedule_units: its thread waited for the rows (a gpu-scope acquire, then a
          // CTA-scope release of the unit that take_unit acquired, so GEMM1's stores happen before
          // this point); only the fence for the bulk copies' proxy is left here.
          if (dynamic && w != blockIdx.x) {
            fence_proxy_async_global();
          } else if (token_tile != ready_tile) {
            ready_tile = token_tile;
            wait_gemm1_units(p.ws.tile_done + token_tile, int32_t(p.g1.m_units()));
          }
        }
      }
      // (the lookup's last shared-memory load is in when tc.rows is)
      FP4MOE_TRACE_ONLY(if (tc.rows >= 0) trace_producer_setup += (unsigned long long)(clock64() - setup_from);)
      const int valid_units = min(T::kConsumers, m_units - mb * T::kConsumers);
#if FP4MOE_BOUND_EXPERIMENT == 1
      const uint32_t b_bytes =
          kDirect ? uint32_t(tc.rows) * 128 : uint32_t(max(8, tile_mma_rows<T>(tc.rows) / 2 / 8 * 8)) * 128;
#else
      const uint32_t b_bytes = kDirect ? uint32_t(tc.rows) * 128 : uint32_t(tile_mma_rows<T>(tc.rows)) * 128;
#endif
      const uint32_t w_bytes = valid_units * layout::kUnitBytes;
      for (int64_t ku = k0; ku < k1; ku += T::kChunks) {
        const int n = k1 - ku < T::kChunks ? int(k1 - ku) : T::kChunks;  // chunks in this stage
#if FP4MOE_BOUND_EXPERIMENT == 2 || FP4MOE_BOUND_EXPERIMENT == 3
        const bool copy_b = kDirect || FP4MOE_BOUND_EXPERIMENT != 2 || ku == k0;
        const bool copy_w = kDirect || FP4MOE_BOUND_EXPERIMENT != 3 || ku == k0;
#else
        constexpr bool copy_b = true, copy_w = true;
#endif
        FP4MOE_TRACE_ONLY(const long long wait_from = clock64();)
        mbar_wait(&empty[ps.stage], ps.phase ^ 1);
        FP4MOE_TRACE_ONLY(const long long issue_from = clock64();
                          trace_producer_wait += (unsigned long long)(issue_from - wait_from);)
        if (T::kTileHandoff && ku == k0)
          tile_info[ps.stage] = make_int4(tc.expert, tc.row0, tc.rows, int32_t(w));
        mbar_arrive_expect_tx(&full[ps.stage], uint32_t(n) * ((copy_b ? b_bytes : 0) + (copy_w ? w_bytes : 0)));
        const int slot0 = ps.stage * T::kChunks;
        if constexpr (kDirect) {
          // The token's row of each chunk, straight from the hidden states: row 0's 128-byte swizzle is
          // the identity. A repeated id's further rows (the same token) go 16 bytes at a time to their
          // swizzled places. The tile's other rows keep what they held: their columns are never stored.
          for (int c = 0; c < n; ++c) {
            uint8_t* const dst = smem + T::kOffB + (slot0 + c) * T::kBTileBytes;
            const uint8_t* const src = reinterpret_cast<const uint8_t*>(p.direct_x) + (ku + c) * 128;
            bulk_g2s(dst, src, 128, &full[ps.stage], pol_act);
            for (int i = 8; i < 8 * tc.rows; ++i)  // piece i % 8 of row i / 8
              bulk_g2s(dst + (i / 8) * 128 + ((i ^ (i / 8)) % 8) * 16, src + (i % 8) * 16, 16, &full[ps.stage],
                       pol_act);
          }
        } else if (copy_b) {
          for (int c = 0; c < n; ++c)
            bulk_g2s(smem + T::kOffB + (slot0 + c) * T::kBTileBytes,
                     act + ((ku + c) * p.layout.rows_cap + tc.row0) * 128, b_bytes, &full[ps.stage], pol_act);
        }
        // The tile's units of one K chunk are contiguous (unit groups, weight_layout.h): one copy; those
        // of the stage's chunks too when the m-block is a whole unit group (then one copy for all: the
        // chunks' offsets differ by a fixed stride, so two adjacent chunks mean all are).
#if FP4MOE_BOUND_EXPERIMENT == 4
        auto w_at = [&](int64_t kc) { return weights + g.unit_offset(0, 0, kc & 7); };
#else
        auto w_at = [&](int64_t kc) { return weights + g.unit_offset(tc.expert, mb * T::kConsumers, kc); };
#endif
        const uint8_t* w0 = w_at(ku);
        if (!copy_w) {
        } else if (n >= 2 && valid_units == T::kConsumers && w_at(ku + 1) == w0 + w_bytes) {
          bulk_g2s(smem + T::kOffW + slot0 * T::kWeightStageBytes, w0, uint32_t(n) * w_bytes, &full[ps.stage],
                   pol_weights);
        } else {
          for (int c = 0; c < n; ++c)
            bulk_g2s(smem + T::kOffW + (slot0 + c) * T::kWeightStageBytes, w_at(ku + c), w_bytes, &full[ps.stage],
                     pol_weights);
        }
        FP4MOE_TRACE_ONLY(trace_producer_issue += (unsigned long long)(clock64() - issue_from);)
        ps.advance(T::kStages);
      }
    }
    if constexpr (dynamic) {
      // No more units: a hand-off of unit -1, with no bytes to wait for, ends the consumers' loop.
      mbar_wait(&empty[ps.stage], ps.phase ^ 1);
      tile_info[ps.stage] = make_int4(-1, 0, 0, -1);
      mbar_arrive(&full[ps.stage]);
    }
    FP4MOE_TRACE_ONLY(if (trace_sums) {
      atomicAdd(trace_sums + kTraceProducerWait, trace_producer_wait);
      atomicAdd(trace_sums + kTraceProducerSetup, trace_producer_setup);
      atomicAdd(trace_sums + kTraceProducerIssue, trace_producer_issue);
      atomicAdd(trace_sums + kTraceProducerLookup, trace_producer_lookup);
      atomicAdd(trace_sums + kTraceProducerTake, trace_producer_take);
      atomicAdd(trace_sums + kTraceProducerTime, (unsigned long long)(clock64() - trace_from));
    })
    return;
  }

  // ---- Consumers ------------------------------------------------------------------------------------
  if constexpr (T::kUseSetmaxnreg) regs_increase<T::kConsumerRegs>();
  // NOTE: every value a branch around wgmma depends on goes through __shfl_sync(..., 0): ptxas then
  // knows it is warp-uniform. Without that it treats the branch as divergent and serializes every
  // wgmma of the kernel (ptxas info C7518), which costs the MMA pipelining.
  ConsumerCtx x;
  x.smem = smem;
  x.full = full;
  x.empty = empty;
  x.scale_codec = layout::scale_codec(p.mxfp4);
  x.c = __shfl_sync(0xffffffffu, wg - 1, 0);
  x.tid = tid;
  x.warp = tid / 32;
  x.lane = tid % 32;
  x.r0 = 16 * x.warp + x.lane / 4;  // this thread's unit rows r0 and r0 + 8
  x.staging = smem + T::kOffStaging + x.c * T::kStagingBytes;
  x.row_weight = reinterpret_cast<float*>(smem + T::kOffRowWeight) + x.c * T::kBN;
  x.split = __shfl_sync(0xffffffffu, split, 0);
  FP4MOE_TRACE_ONLY(static_assert(T::kConsumers <= 8, "trace_consumer_acc");
                    x.trace_acc = trace_consumer_acc[x.c];
                    if (tid == 0) for (int i = 0; i < 6; ++i) x.trace_acc[i] = 0;)
  PipeState ps;
  uint32_t count_phase = 0;  // GEMM1 with the overlap: the signalling thread's `free` phase (above)
  for (int64_t w = blockIdx.x; dynamic || w < num_work; w += gridDim.x) {
    FP4MOE_TRACE_ONLY(const long long find_from = clock64();)
    int4 info = {};
    if constexpr (dynamic) {
      // The unit and its tile from the producer, once its first stage is in (consume_tile's wait on
      // the same phase then returns at once): unit -1 after the last.
      mbar_wait(&full[ps.stage], ps.phase);
      info = tile_info[ps.stage];
      w = __shfl_sync(0xffffffffu, info.w, 0);
      if (w < 0) break;
    }
    const uint32_t t = tile_of(w);
    x.tile = t;
    x.split_index = int(uint32_t(w) - t * uint32_t(split));
    x.k_units = __shfl_sync(0xffffffffu,
                            unsplit ? int(k_units) : int(k_begin(x.split_index + 1) - k_begin(x.split_index)), 0);
    TileCoord tc;
    x.token_tile = int(p.div_m_blocks.div(t));
    if constexpr (dynamic) {
      tc = {info.x, info.y, __shfl_sync(0xffffffffu, info.z, 0)};
    } else {
      tc = coord_of(x.token_tile);
      tc.rows = __shfl_sync(0xffffffffu, tc.rows, 0);
    }
    const int mu = int(t - uint32_t(x.token_tile) * uint32_t(m_blocks)) * T::kConsumers + x.c;
    const bool active = __shfl_sync(0xffffffffu, int(mu < m_units), 0) != 0;
    const int bucket = __shfl_sync(0xffffffffu, tile_bucket<T>(tc.rows), 0);
    FP4MOE_TRACE_ONLY(const long long consume_from = clock64();
                      if (tid == 0) x.trace_acc[3] += (unsigned long long)(consume_from - find_from);)
    if constexpr (kRanged) {
      // One call per canonical K range (consume_tile sums them), the stages running on across them.
      // (A split unit is one range.)
      const int k_all = int(x.k_units);
      x.ranges = unsplit ? p.k_ranges : 1;
      const int k_last = k_all - (x.ranges - 1) * p.k_range_chunks;  // (a split unit's: all of it)
      for (x.range = 0; x.range < x.ranges; ++x.range) {
        x.k_units = __shfl_sync(0xffffffffu, x.range + 1 < x.ranges ? p.k_range_chunks : k_last, 0);
        consume_bucketed<T, kDirect, true>(p, x, tc, mu, active, bucket, ps);
      }
    } else {
      consume_bucketed<T, kDirect, false>(p, x, tc, mu, active, bucket, ps);
    }
    if constexpr (T::kGemm1 && T::kOverlaps && !kDirect) {
      // The unit's epilogue is done: hand the count to thread 32, once it has taken the previous
      // one. Every thread waits, then arrives (a CTA-scope release of its own stores): with thread
      // 0 alone arriving, `free` could complete the next phase before another warp's wait had seen
      // the previous one, which then waited on the parity of a phase two ahead, for ever (found in
      // review after racecheck did not finish). (A wait loop in thread 0 alone also cost the K
      // loop ptxas's uniform registers, 402 -> 510 SASS instructions per four chunks.)
      if (p.overlap) {
        mbar_wait(count_free, count_phase ^ 1);
        mbar_arrive(counted);
        count_phase ^= 1;
      }
    }
    FP4MOE_TRACE_ONLY(if (tid == 0) {
      x.trace_acc[4] += (unsigned long long)(clock64() - consume_from);
      x.trace_acc[5] += 1;
    })
  }
  FP4MOE_TRACE_ONLY(if (tid == 0 && trace_sums) {
    atomicAdd(trace_sums + kTraceConsumerWait, x.trace_acc[0]);
    atomicAdd(trace_sums + kTraceConsumerKLoop, x.trace_acc[1]);
    atomicAdd(trace_sums + kTraceConsumerPre, x.trace_acc[2]);
    atomicAdd(trace_sums + kTraceConsumerFind, x.trace_acc[3]);
    atomicAdd(trace_sums + kTraceConsumerTile, x.trace_acc[4]);
    atomicAdd(trace_sums + kTraceConsumerTiles, x.trace_acc[5]);
    atomicAdd(trace_sums + kTraceConsumerTime, (unsigned long long)(clock64() - trace_from));
  })
  if constexpr (kDirect) {
    if (tid == 0) pdl_wait();  // the plan and the permute complete before GEMM1 does (also in a CTA without a tile)
  }
}

}  // namespace fp4moe::sm90
