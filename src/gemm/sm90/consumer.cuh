// sm_90a MoE GEMMs (src/gemm/sm90/moe_gemm_sm90.cuh): the consumer warpgroups. consume_tile runs one
// tile's K loop (the weights decoded in registers as the wgmma A operand, the tokens from the
// swizzled shared-memory stages as B), then the K ranges' running total or split-K's partials where
// a work unit is part of a tile, and the epilogue (GEMM1: alpha, bias, activation, w4a4's fake
// quantization, the tiled intermediate; GEMM2: alpha, bias, router weight, y), with the same
// numerics as the SIMT kernels (src/gemm/simt/) and reference/moe_reference.cpp.
#pragma once

#include <cstdint>
#include <utility>

#include "src/common/pdl.h"
#include "src/format/block_codec.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/ptx.cuh"
#include "src/gemm/sm90/scheduler.cuh"
#include "src/gemm/sm90/traits.cuh"

namespace fp4moe::sm90 {

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

}  // namespace fp4moe::sm90
