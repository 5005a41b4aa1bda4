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
//
// This file holds the kernel: shared memory, barriers, the warp roles and the producer. Its parts:
// traits.cuh (Sm90Traits: a config's constants and checks; the wgmma ops; the weights' decode),
// scheduler.cuh (stage release, tile lookup, the GEMM1 -> GEMM2 hand-over, dynamic work units) and
// consumer.cuh (a consumer warpgroup's K loop and epilogue of one tile).
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // N = 48, 72, 80

#include <cstdint>
#include <utility>

#include "src/common/pdl.h"
#include "src/format/block_codec.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/consumer.cuh"
#include "src/gemm/sm90/ptx.cuh"
#include "src/gemm/sm90/scheduler.cuh"
#include "src/gemm/sm90/traits.cuh"
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
