// The forward pass's scratch memory, carved from one caller-allocated buffer. Every region is sized
// from problem.max_tokens at set-up, so a forward never allocates and can be captured in a graph.
//
// Activations travel between kernels in a "tiled" bf16 layout that is the wgmma B-operand layout in
// shared memory (K-major, 128-byte swizzle), so a GEMM stage is one contiguous bulk copy:
//   [K/64 chunks][rows_cap rows][64 values]: row p of chunk c is 128 bytes at (c*rows_cap + p)*128,
//   its 16-byte piece j stored at piece j ^ (p % 8).
// Rows are routed (token, slot) pairs in expert-major order; each local expert's segment starts at a
// multiple of 8 rows (one swizzle atom), so a tile of rows never straddles an atom.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp4moe/numerics.h"
#include "src/moe/weight_layout.h"
#include "src/common/trace.h"

namespace fp4moe {

constexpr int kMaxTileTokens = 256;  // the largest token tile of any GEMM config (slack rows)

// The plan's rules, shared by the plan kernels and direct GEMM1 (which builds the same tables):
// whether a routed id is an expert of this shard (false for an id out of range, which the plan
// counts as bad, or of another shard), with *local its local index (id - expert_begin) either
// way; and the rows of an expert's segment, its count rounded up to an atom.
FP4MOE_HD bool is_local_expert(int32_t id, int num_experts, int expert_begin, int num_local, int* local) {
  *local = id - expert_begin;
  return id >= 0 && id < num_experts && *local >= 0 && *local < num_local;
}
FP4MOE_HD int32_t segment_rows(int32_t count) { return (count + 7) / 8 * 8; }

// The plan runs in kPlanCtas CTAs (three launches) from kPlanMultiMinPairs routed pairs, else in one.
constexpr int kPlanCtas = 64;
constexpr int64_t kPlanMultiMinPairs = 16384;

// Split-K (LayerOptions::split_k, and GEMM2's split at its K ranges below; BN16 configs): at most
// kMaxSplitUnits (tile, K range) work units per GEMM, each leaving up to kSplitUnitFloats fp32
// partial sums (4 consumers x 128 threads x 8): 16 MB, only for layers that may split (2048 units,
// 32 MB, in the FP4MOE_MAX_RANGE_CHUNKS=32 experiment). (512 until session 29 kept Llama-4 T=16, 320
// tiles at most in two ranges, from splitting.)
#ifndef FP4MOE_MAX_RANGE_CHUNKS
#define FP4MOE_MAX_RANGE_CHUNKS 64  // (CMake's FP4MOE_MAX_RANGE_CHUNKS: kMaxRangeChunks below)
#endif
constexpr int kMaxSplitUnits = FP4MOE_MAX_RANGE_CHUNKS < 64 ? 2048 : 1024;
constexpr int kSplitUnitFloats = 4 * 128 * 8;
constexpr int kSplitCounters = kMaxSplitUnits * 4;  // per GEMM: one per (tile, consumer)

// GEMM2's canonical K ranges: where its K (the local intermediate size) spans more than
// kRangeChunks chunks of 64 (Llama-4: 128, Mixtral-8x7B: 224), every sm90 GEMM2 kernel sums K in
// ranges of k_range_chunks chunks, each range's MMAs started from zero and added to a running fp32
// total in range order. A split at those boundaries (sm90::select_range_split) then gives the
// bits of no split, so it can run by default where GEMM2 has few tiles, and a token's bits still do
// not depend on its batch. Each CTA keeps its running totals in a slot of kRangeSlotFloats
// (every consumer thread's accumulators: at most 4 x 128 threads x 64 or 2 x 128 x 128).
constexpr int kRangeChunks = 64;
constexpr int kRangeSlotFloats = 4 * 128 * 64;
// The ranges are as few as give each at most kMaxRangeChunks chunks, at least two, of equal length
// rounded up to 4 chunks (the decode kernels' stage: a range starts a stage), the last one not longer:
// Llama-4 two of 64, Mixtral-8x7B four of 56 (64, 64, 64 and 32 until session 25, whose last
// range left SMs idle in a split's second round). Each boundary costs a prefill tile a pass of its
// accumulators through L2 (Mixtral with two ranges of 112: prefill -1%, T=1 -7.8%, but T=2 +5.7%
// and T=3 slower, whose 96 tiles then did not split; session 25, run 3), while more, shorter units
// balance a decode split better over the SMs GEMM1 frees.
constexpr int kMaxRangeChunks = FP4MOE_MAX_RANGE_CHUNKS;
static_assert(kMaxRangeChunks % 4 == 0 && kMaxRangeChunks <= kRangeChunks, "K ranges: lengths");
// The canonical range length of k_chunks K chunks (all of them where they are one range), the
// number of ranges, and whether a GEMM2 over a local intermediate size of local_inter has more than
// one.
FP4MOE_HD int64_t k_range_chunks(int64_t k_chunks) {
  if (k_chunks <= kRangeChunks) return k_chunks;
  // (at least two: k_chunks > kRangeChunks >= kMaxRangeChunks)
  const int64_t n = (k_chunks + kMaxRangeChunks - 1) / kMaxRangeChunks;
  const int64_t len = (k_chunks + n - 1) / n;
  return (len + 3) / 4 * 4;
}
FP4MOE_HD int64_t k_range_count(int64_t k_chunks) {
  const int64_t len = k_range_chunks(k_chunks);
  return len > 0 ? (k_chunks + len - 1) / len : 0;
}
FP4MOE_HD bool gemm2_has_ranges(int64_t local_inter) { return k_range_count((local_inter + 63) / 64) > 1; }

FP4MOE_HD int64_t tiled_offset_bytes(int64_t row, int64_t k, int64_t rows_cap) {
  const int64_t chunk = k / 64;
  const int piece = int(k % 64) / 8;
  return (chunk * rows_cap + row) * 128 + ((piece ^ int(row % 8)) * 16) + (k % 8) * 2;
}

struct WorkspaceLayout {
  int64_t max_pairs = 0;  // max_tokens * top_k
  int64_t rows_cap = 0;   // rows of the tiled activation buffers
  int64_t x_k = 0;        // padded K of GEMM1 (H rounded to 64)
  int64_t h_k = 0;        // padded K of GEMM2 (local I rounded to 64)
  int num_local_experts = 0;
  // Byte offsets.
  size_t topk_ids = 0, topk_weights = 0;
  size_t counts = 0;       // int32 [E_local]: routed pairs per local expert; [E_local] = bad-id count
  size_t seg_start = 0;    // int32 [E_local + 1]: first row of each expert's segment (multiple of 8)
  size_t tile_start = 0;   // int32 [E_local + 1]: first token tile of each expert (for the run's tile size)
  size_t tail_start = 0;   // int32 [E_local + 1]: first tail tile of each expert (PermuteParams::tail_rows)
  size_t plan_hist = 0;    // int32 [kPlanCtas][E_local + 1]: the multi-CTA plan's per-CTA counts, then rows
  size_t pair_row = 0;     // int32 [max_pairs]: row of a (token, slot) pair, -1 if not local
  size_t row_pair = 0;     // int32 [rows_cap]: pair of a row (valid rows only)
  size_t row_weight = 0;   // fp32 [rows_cap]: router weight of a row's pair (valid rows only; the permute's copy)
  // int32 [max_pairs + E_local]: per token tile, GEMM1's finished weight units (MoeGemmParams::overlap;
  // zeroed by the plan for the tiles of the forward)
  size_t tile_done = 0;
  // int32 [2]: the next dynamically taken work unit, less the grid, of GEMM2 ([0]) and GEMM1 ([1])
  // (schedule_units: the decode and small GEMM2s and the wide-tile kernels; zeroed by the plan with
  // tile_done)
  size_t next_unit = 0;
  size_t x = 0;            // bf16 tiled [x_k/64][rows_cap][64]
  size_t h = 0;            // bf16 tiled [h_k/64][rows_cap][64]
  size_t y = 0;            // bf16 [rows_cap, H]: weighted expert outputs
  // Split-K (with LayerOptions::split_k, or a GEMM2 over K ranges that may split at them; else empty):
  size_t split_partial = 0;  // fp32 [kMaxSplitUnits][kSplitUnitFloats]: partial sums
  size_t split_count = 0;    // int32 [2][kSplitCounters]: arrivals per (tile, consumer), GEMM1 then GEMM2
  int split_counters = 0;    // 2 * kSplitCounters with split-K, else 0 (what the plan kernel zeroes)
#if FP4MOE_TRACE
  size_t trace = 0;          // u64 [kTraceKernels][kTraceWords] (src/common/trace.h; trace builds only)
#endif
  // GEMM2 over canonical K ranges (gemm2_has_ranges; else empty): fp32 [range_ctas]
  // [kRangeSlotFloats], each CTA's running totals. The main launch and its tail launch share them:
  // the tail launch's CTAs wait for the main launch to complete before any work (griddepcontrol.wait
  // in moe_gemm_sm90_kernel; until session 26 each launch had its own, 17 MB more at 132 SMs).
  // (Last, so that the regions before it do not move with range_ctas.)
  size_t range_total = 0;
  int range_ctas = 0;  // the most CTAs of one GEMM2 launch that have a slot
  size_t total = 0;

  static WorkspaceLayout make(int64_t max_tokens, int top_k, int num_local_experts, int64_t hidden,
                              int64_t local_inter, bool split_k = false, int gemm_ctas = 0) {
    WorkspaceLayout w;
    auto align = [](size_t v) { return (v + 255) / 256 * 256; };
    w.max_pairs = max_tokens * top_k;
    w.num_local_experts = num_local_experts;
    w.rows_cap = layout::round_up(w.max_pairs + 7 * int64_t(num_local_experts), 8) + kMaxTileTokens;
    w.x_k = layout::round_up(hidden, 64);
    w.h_k = layout::round_up(local_inter, 64);
    size_t off = 0;
    auto take = [&](size_t bytes) {
      const size_t at = off;
      off = align(off + bytes);
      return at;
    };
    const size_t e1 = size_t(num_local_experts) + 1;
    w.topk_ids = take(4 * size_t(w.max_pairs));
    w.topk_weights = take(4 * size_t(w.max_pairs));
    w.counts = take(4 * e1);
    w.seg_start = take(4 * e1);
    w.tile_start = take(4 * e1);
    w.tail_start = take(4 * e1);
    w.plan_hist = take(4 * size_t(kPlanCtas) * e1);
    w.pair_row = take(4 * size_t(w.max_pairs));
    w.row_pair = take(4 * size_t(w.rows_cap));
    w.row_weight = take(4 * size_t(w.rows_cap));
    w.tile_done = take(4 * (size_t(w.max_pairs) + size_t(num_local_experts)));
    w.next_unit = take(8);
    w.x = take(2 * size_t(w.rows_cap) * size_t(w.x_k));
    w.h = take(2 * size_t(w.rows_cap) * size_t(w.h_k));
    w.y = take(2 * size_t(w.rows_cap) * size_t(hidden));
    // (A GEMM2 over K ranges may split at them by default: it needs the split's regions too.)
    const bool ranges = gemm2_has_ranges(local_inter);
    w.split_counters = split_k || ranges ? 2 * kSplitCounters : 0;
    w.split_partial = take(split_k || ranges ? 4 * size_t(kMaxSplitUnits) * kSplitUnitFloats : 0);
    w.split_count = take(4 * size_t(w.split_counters));
#if FP4MOE_TRACE
    w.trace = take(kTraceBytes);
#endif
    w.range_ctas = ranges ? gemm_ctas : 0;
    w.range_total = take(4 * size_t(w.range_ctas) * kRangeSlotFloats);
    w.total = off;
    return w;
  }
};

// Device pointers into one workspace.
struct WorkspacePtrs {
  int32_t* topk_ids;
  float* topk_weights;
  int32_t* counts;
  int32_t* seg_start;
  int32_t* tile_start;
  int32_t* tail_start;
  int32_t* plan_hist;
  int32_t* pair_row;
  int32_t* row_pair;
  float* row_weight;
  int32_t* tile_done;
  int32_t* next_unit;
  uint16_t* x;
  uint16_t* h;
  uint16_t* y;
  float* split_partial;
  int32_t* split_count;
#if FP4MOE_TRACE
  unsigned long long* trace;
#endif
  float* range_total;

  static WorkspacePtrs from(void* base, const WorkspaceLayout& l) {
    char* b = static_cast<char*>(base);
    return {reinterpret_cast<int32_t*>(b + l.topk_ids), reinterpret_cast<float*>(b + l.topk_weights),
            reinterpret_cast<int32_t*>(b + l.counts),   reinterpret_cast<int32_t*>(b + l.seg_start),
            reinterpret_cast<int32_t*>(b + l.tile_start), reinterpret_cast<int32_t*>(b + l.tail_start),
            reinterpret_cast<int32_t*>(b + l.plan_hist),
            reinterpret_cast<int32_t*>(b + l.pair_row),
            reinterpret_cast<int32_t*>(b + l.row_pair),   reinterpret_cast<float*>(b + l.row_weight),
            reinterpret_cast<int32_t*>(b + l.tile_done), reinterpret_cast<int32_t*>(b + l.next_unit),
            reinterpret_cast<uint16_t*>(b + l.x),       reinterpret_cast<uint16_t*>(b + l.h),
            reinterpret_cast<uint16_t*>(b + l.y),       reinterpret_cast<float*>(b + l.split_partial),
            reinterpret_cast<int32_t*>(b + l.split_count)
#if FP4MOE_TRACE
            , reinterpret_cast<unsigned long long*>(b + l.trace)
#endif
            , reinterpret_cast<float*>(b + l.range_total)
    };
  }
};

}  // namespace fp4moe
