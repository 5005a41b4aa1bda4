// Routing plan, permute (+ w4a4 activation quantization) and finalize kernels. Contracts in
// permute.h; the numerics (Llama-4 input weighting, NVFP4 `kernel`-recipe fake quantization) match
// reference/moe_reference.cpp exactly.
#include <cuda_bf16.h>

#include <algorithm>

#include "src/common/cuda_utils.h"
#include "src/common/pdl.h"
#include "src/format/block_codec.h"
#include "src/permute/permute.h"
#include "src/routing/det_math.h"

namespace fp4moe {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kRowThreads = 128;
constexpr int kPlanBatch = 8;     // routed ids a plan thread loads before it uses them

// Calls visit(i, e) for each routed pair i of [begin, end) this thread owns (begin + threadIdx.x,
// then every blockDim.x), with its expert id e. The ids are loaded kPlanBatch at a time, all before
// any is used (at 65536 pairs, DeepSeek-R1 T=8192, one CTA took 100 us reading one at a time, 83 us
// in batches). (__ldcg: the ids were written by the routing kernel, the plan's PDL primary, so not
// through the non-coherent path.)
template <class Visit>
__device__ __forceinline__ void for_each_routed_id(const PermuteParams& p, int64_t begin, int64_t end,
                                                   Visit&& visit) {
  const int64_t batch_stride = int64_t(blockDim.x) * kPlanBatch;
  for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += batch_stride) {
    int32_t ids[kPlanBatch];
#pragma unroll
    for (int j = 0; j < kPlanBatch; ++j) {
      const int64_t i = i0 + int64_t(j) * blockDim.x;
      ids[j] = i < end ? __ldcg(p.ws.topk_ids + i) : -1;
    }
#pragma unroll
    for (int j = 0; j < kPlanBatch; ++j) {
      const int64_t i = i0 + int64_t(j) * blockDim.x;
      if (i >= end) break;
      visit(i, ids[j]);
    }
  }
}

// Counts the local pairs of [begin, end) per expert into the shared counters (and bad ids into
// *bad).
__device__ __forceinline__ void plan_count(const PermuteParams& p, int64_t begin, int64_t end, int32_t* counts,
                                           int32_t* bad) {
  const int num_local = p.num_local_experts;
  for_each_routed_id(p, begin, end, [&](int64_t, int32_t e) {
    if (e < 0 || e >= p.num_experts) {
      atomicAdd(bad, 1);
      return;
    }
    const int local = e - p.expert_begin;
    if (local >= 0 && local < num_local) atomicAdd(&counts[local], 1);
  });
}

// An expert's share of the plan (or a sum of shares): its rows (8-row aligned), its token tiles,
// and its tail tile (1 when the rows past its last whole tile go to a tail launch).
struct PlanSums {
  int32_t rows, tiles, tails;
};

__device__ __forceinline__ PlanSums expert_plan(const PermuteParams& p, int32_t count) {
  const int32_t rest = count % p.tile_tokens;
  const int32_t tail = count > p.tile_tokens && rest > 0 && rest <= p.tail_rows ? 1 : 0;
  return {segment_rows(count), (count + p.tile_tokens - 1) / p.tile_tokens - tail, tail};
}

// Inclusive sums over lanes 0..lane of the warp.
__device__ __forceinline__ PlanSums warp_inclusive_sums(PlanSums v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int32_t r = __shfl_up_sync(0xffffffffu, v.rows, d);
    const int32_t t = __shfl_up_sync(0xffffffffu, v.tiles, d);
    const int32_t u = __shfl_up_sync(0xffffffffu, v.tails, d);
    if (lane >= d) v.rows += r, v.tiles += t, v.tails += u;
  }
  return v;
}

// The whole CTA scans the padded counts and the token-tile and tail-tile counts: thread e owns local
// expert e (num_local <= blockDim.x), each warp scans its 32 experts with shuffles and adds the
// totals of the warps before it (from shared memory). Writes counts, seg_start, tile_start,
// tail_start (and the bad-id count), turns the shared counters into each expert's first row and
// returns the number of token tiles. (It was warp 0 alone, 32 experts at a time: with that and the
// ids loaded twice, the one-CTA plan of DeepSeek-R1 T=1 took 4.0 us in a traced forward, 2.9 us
// after.) Every thread of the CTA must call it.
__device__ __forceinline__ int32_t plan_scan(const PermuteParams& p, int32_t* counts, int32_t bad_ids) {
  constexpr int kMaxWarps = kPlanThreads / 32;
  __shared__ PlanSums warp_sums[kMaxWarps];
  const int num_local = p.num_local_experts;
  const int e = threadIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t count = e < num_local ? counts[e] : 0;
  const PlanSums own = expert_plan(p, count);
  const PlanSums incl = warp_inclusive_sums(own, lane);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  // The totals of the warps before this one, and of all warps (lane l reads warp l's sums).
  const int warps = int(blockDim.x) / 32;
  const PlanSums w = lane < warps ? warp_sums[lane] : PlanSums{0, 0, 0};
  const bool before = lane < warp;
  const int32_t row_base = __reduce_add_sync(0xffffffffu, before ? w.rows : 0);
  const int32_t tile_base = __reduce_add_sync(0xffffffffu, before ? w.tiles : 0);
  const int32_t tail_base = __reduce_add_sync(0xffffffffu, before ? w.tails : 0);
  if (e < num_local) {
    p.ws.counts[e] = count;
    p.ws.seg_start[e] = row_base + incl.rows - own.rows;
    counts[e] = row_base + incl.rows - own.rows;  // from here on: expert e's first row
    p.ws.tile_start[e] = tile_base + incl.tiles - own.tiles;
    p.ws.tail_start[e] = tail_base + incl.tails - own.tails;
  }
  const int32_t row_total = __reduce_add_sync(0xffffffffu, w.rows);
  const int32_t tile_total = __reduce_add_sync(0xffffffffu, w.tiles);
  const int32_t tail_total = __reduce_add_sync(0xffffffffu, w.tails);
  if (threadIdx.x == 0) {
    p.ws.seg_start[num_local] = row_total;
    p.ws.tile_start[num_local] = tile_total;
    p.ws.tail_start[num_local] = tail_total;
    p.ws.counts[num_local] = bad_ids;  // read by MoeLayer::check_device_errors()
  }
  return tile_total;
}

// Routed pair i (id e) takes the next row of its expert from the shared cursors (pair_row, row_pair);
// -1 for an id out of range or of another shard.
__device__ __forceinline__ void assign_pair_row(const PermuteParams& p, int64_t i, int32_t e, int32_t* cursor) {
  int local;
  int32_t row = -1;
  if (is_local_expert(e, p.num_experts, p.expert_begin, p.num_local_experts, &local)) {
    row = atomicAdd(&cursor[local], 1);
    p.ws.row_pair[row] = int32_t(i);
  }
  p.ws.pair_row[i] = row;
}

// Rows: each local pair of [begin, end) takes the next row of its expert (shared cursors; the order
// within a segment is the order of the atomics; no result depends on it: rows are computed
// independently and finalize sums by slot). Here rather than in the permute, so that the permute
// can spread one row over several CTAs.
__device__ __forceinline__ void plan_assign(const PermuteParams& p, int64_t begin, int64_t end, int32_t* cursor) {
  for_each_routed_id(p, begin, end, [&](int64_t i, int32_t e) { assign_pair_row(p, i, e, cursor); });
}

// Zeroes the GEMMs' split-K arrival counters (every forward starts them at zero).
__device__ __forceinline__ void zero_split_counters(const PermuteParams& p) {
  for (int i = threadIdx.x; i < p.layout.split_counters; i += blockDim.x) p.ws.split_count[i] = 0;
}

// Zeroes GEMM1's finished-unit counts of this forward's token tiles (MoeGemmParams::overlap) and
// the unit counters of the dynamically scheduled GEMMs (schedule_units).
__device__ __forceinline__ void zero_tile_done(const PermuteParams& p, int32_t tiles) {
  for (int32_t i = threadIdx.x; i < tiles; i += blockDim.x) p.ws.tile_done[i] = 0;
  if (threadIdx.x < 2) p.ws.next_unit[threadIdx.x] = 0;
}

// The plan in one CTA (up to kPlanMultiMinPairs pairs). Shared memory: E_local counters. Each
// thread loads its routed ids once, all before any is used, and keeps them in registers for both
// the count and the row assignment.
constexpr int kPlanIdsPerThread = int(kPlanMultiMinPairs / kPlanThreads);
static_assert(int64_t(kPlanIdsPerThread) * kPlanThreads == kPlanMultiMinPairs, "the one-CTA plan's ids fill its registers");
static_assert(routing::kMaxExperts <= kPlanThreads, "plan_scan: a thread per local expert");

__global__ void __launch_bounds__(kPlanThreads) plan_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePlan);
  extern __shared__ int32_t smem_counts[];
  const int num_local = p.num_local_experts;
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) smem_counts[e] = 0;
  __shared__ int32_t bad_ids;
  if (threadIdx.x == 0) bad_ids = 0;
  pdl_launch_dependents();
  pdl_wait();  // the routing output
  FP4MOE_TRACE_WAITED();
  const int64_t num_pairs = p.num_tokens * p.top_k;
  int32_t ids[kPlanIdsPerThread];
#pragma unroll
  for (int j = 0; j < kPlanIdsPerThread; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * kPlanThreads;
    ids[j] = i < num_pairs ? __ldcg(p.ws.topk_ids + i) : 0;
  }
  zero_split_counters(p);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPlanIdsPerThread; ++j) {
    if (threadIdx.x + int64_t(j) * kPlanThreads >= num_pairs) break;
    const int32_t e = ids[j];
    if (e < 0 || e >= p.num_experts) {
      atomicAdd(&bad_ids, 1);
      continue;
    }
    const int local = e - p.expert_begin;
    if (local >= 0 && local < num_local) atomicAdd(&smem_counts[local], 1);
  }
  __syncthreads();
  const int32_t tiles = plan_scan(p, smem_counts, bad_ids);
  zero_tile_done(p, tiles);
  __syncthreads();
  // Rows, as in plan_assign.
#pragma unroll
  for (int j = 0; j < kPlanIdsPerThread; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * kPlanThreads;
    if (i >= num_pairs) break;
    assign_pair_row(p, i, ids[j], smem_counts);
  }
}

// The plan over kPlanCtas CTAs (from kPlanMultiMinPairs pairs: one CTA's shared-memory atomics took
// 84 us at 65536 pairs), in three launches: each CTA counts a slice of the pairs into its row of
// ws.plan_hist; one CTA sums the rows, scans them like plan_kernel and replaces each CTA's count by
// its first row in each expert's segment; each CTA then places its slice from those rows.
__host__ __device__ constexpr int64_t plan_slice(int64_t num_pairs) { return (num_pairs + kPlanCtas - 1) / kPlanCtas; }

__global__ void __launch_bounds__(kPlanThreads) plan_count_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePlanCount);
  extern __shared__ int32_t smem_counts[];
  const int num_local = p.num_local_experts;
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) smem_counts[e] = 0;
  __shared__ int32_t bad_ids;
  if (threadIdx.x == 0) bad_ids = 0;
  pdl_launch_dependents();
  pdl_wait();  // the routing output
  FP4MOE_TRACE_WAITED();
  __syncthreads();
  const int64_t num_pairs = p.num_tokens * p.top_k, slice = plan_slice(num_pairs);
  const int64_t begin = std::min<int64_t>(int64_t(blockIdx.x) * slice, num_pairs);
  plan_count(p, begin, std::min<int64_t>(begin + slice, num_pairs), smem_counts, &bad_ids);
  __syncthreads();
  int32_t* hist = p.ws.plan_hist + int64_t(blockIdx.x) * (num_local + 1);
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) hist[e] = smem_counts[e];
  if (threadIdx.x == 0) hist[num_local] = bad_ids;
}

__global__ void __launch_bounds__(kPlanThreads) plan_scan_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePlanScan);
  extern __shared__ int32_t smem_counts[];
  const int num_local = p.num_local_experts;
  __shared__ int32_t bad_ids;
  pdl_launch_dependents();
  pdl_wait();  // the per-CTA counts
  FP4MOE_TRACE_WAITED();
  zero_split_counters(p);
  const int stride = num_local + 1;
  for (int e = threadIdx.x; e <= num_local; e += blockDim.x) {
    int32_t sum = 0;
#pragma unroll 16
    for (int c = 0; c < kPlanCtas; ++c) sum += p.ws.plan_hist[c * stride + e];
    if (e < num_local) smem_counts[e] = sum;
    else bad_ids = sum;
  }
  __syncthreads();
  const int32_t tiles = plan_scan(p, smem_counts, bad_ids);
  zero_tile_done(p, tiles);
  __syncthreads();
  // Each CTA's first row in each expert's segment: the segment start plus the earlier CTAs' counts.
  // (16 counts loaded before any store: one at a time, each load waited behind the previous store.)
  static_assert(kPlanCtas % 16 == 0, "the per-CTA rows go 16 CTAs at a time");
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) {
    int32_t row = smem_counts[e];
    for (int c0 = 0; c0 < kPlanCtas; c0 += 16) {
      int32_t n[16];
#pragma unroll
      for (int c = 0; c < 16; ++c) n[c] = p.ws.plan_hist[(c0 + c) * stride + e];
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        p.ws.plan_hist[(c0 + c) * stride + e] = row;
        row += n[c];
      }
    }
  }
}

__global__ void __launch_bounds__(kPlanThreads) plan_assign_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePlanAssign);
  extern __shared__ int32_t smem_cursor[];
  const int num_local = p.num_local_experts;
  pdl_launch_dependents();
  pdl_wait();  // the rows of the scan
  FP4MOE_TRACE_WAITED();
  const int32_t* first = p.ws.plan_hist + int64_t(blockIdx.x) * (num_local + 1);
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) smem_cursor[e] = first[e];
  __syncthreads();
  const int64_t num_pairs = p.num_tokens * p.top_k, slice = plan_slice(num_pairs);
  const int64_t begin = std::min<int64_t>(int64_t(blockIdx.x) * slice, num_pairs);
  plan_assign(p, begin, std::min<int64_t>(begin + slice, num_pairs), smem_cursor);
}

__device__ __forceinline__ void store_piece(uint16_t* tiled, int64_t row, int64_t k, int64_t rows_cap, uint4 v) {
  *reinterpret_cast<uint4*>(reinterpret_cast<char*>(tiled) + tiled_offset_bytes(row, k, rows_cap)) = v;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16);
}

// One 16-element block of a GEMM1 input row from the token's bf16 block (lo, hi): scaled by the
// router weight for Llama-4, NVFP4 fake-quantized in w4a4 mode. Prequantized rows (w4a4, quantized
// by the parallel dispatch with the layer's input scale and the router weight applied) are what the
// two steps would produce: copied unchanged.
__device__ __forceinline__ void permute_block(const PermuteParams& p, uint4 lo, uint4 hi, float weight, float gs,
                                              uint32_t (&out)[8]) {
  float u[16];
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    u[2 * i] = bf16_to_float(uint16_t(w[i] & 0xffff));
    u[2 * i + 1] = bf16_to_float(uint16_t(w[i] >> 16));
  }
  if (p.weight_on_input && !p.prequantized) {
#pragma unroll
    for (int i = 0; i < 16; ++i) u[i] = bf16_to_float(float_to_bf16(mul_rn(u[i], weight)));
  }
  if (p.w4a4 && !p.prequantized) detail::fake_quantize_nvfp4_block_kernel(u, gs);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = pack_bf16x2(u[2 * i], u[2 * i + 1]);
}

// Zeroes the intermediate's K padding of a row (GEMM1 writes only the first inter_local columns),
// the blocks first, first + step, ... of it.
__device__ __forceinline__ void zero_h_padding(const PermuteParams& p, int32_t row, int64_t first, int64_t step) {
  for (int64_t b = p.inter_local / 16 + first; b < p.layout.h_k / 16; b += step) {
    store_piece(p.ws.h, row, b * 16, p.layout.rows_cap, make_uint4(0, 0, 0, 0));
    store_piece(p.ws.h, row, b * 16 + 8, p.layout.rows_cap, make_uint4(0, 0, 0, 0));
  }
}

// One thread's share of a pair's GEMM1 input row: the 16-element blocks first, first + step, ...
// of its token's row (blockIdx.y picks the column range), with the first block loaded at once,
// before the kernel's wait: the hidden rows are the forward's input, complete before its first
// kernel started (PermuteParams::plan_is_first).
struct RowShare {
  int64_t t, first, step;
  uint4 lo, hi;  // the first block
};

__device__ __forceinline__ RowShare load_row_share(const PermuteParams& p, int64_t pair) {
  RowShare r;
  r.t = pair / p.top_k;
  r.first = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  r.step = int64_t(gridDim.y) * blockDim.x;
  r.lo = make_uint4(0, 0, 0, 0), r.hi = r.lo;
  if (r.first < p.layout.x_k / 16 && r.first * 16 < p.hidden_size) {
    const uint4* src = reinterpret_cast<const uint4*>(p.hidden + r.t * p.hidden_size + r.first * 16);
    r.lo = src[0], r.hi = src[1];
  }
  return r;
}

// Writes the thread's blocks of the row (permute_block of each; zeros past H) and its blocks of the
// intermediate's K padding.
__device__ __forceinline__ void write_row_share(const PermuteParams& p, RowShare r, int32_t row, float weight,
                                                float gs) {
  const int64_t H = p.hidden_size, x_blocks = p.layout.x_k / 16;
  for (int64_t b = r.first; b < x_blocks; b += r.step) {
    uint32_t out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (b * 16 < H) {
      if (b != r.first) {
        const uint4* src = reinterpret_cast<const uint4*>(p.hidden + r.t * H + b * 16);
        r.lo = src[0], r.hi = src[1];
      }
      permute_block(p, r.lo, r.hi, weight, gs, out);
    }
    store_piece(p.ws.x, row, b * 16, p.layout.rows_cap, make_uint4(out[0], out[1], out[2], out[3]));
    store_piece(p.ws.x, row, b * 16 + 8, p.layout.rows_cap, make_uint4(out[4], out[5], out[6], out[7]));
  }
  zero_h_padding(p, row, r.first, r.step);
}

// A CTA per routed (token, slot) pair, and for up to 256 pairs per range of kRowThreads 16-element
// column blocks (blockIdx.y), so that a few tokens still spread over many SMs (one CTA per pair
// took 6.2 us at DeepSeek-R1 T=1, three dependent loads per thread); each thread owns 16-element
// blocks of the row. The row comes from the plan.
__global__ void __launch_bounds__(kRowThreads) permute_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePermute);
  const int64_t pair = blockIdx.x;
  const RowShare share = load_row_share(p, pair);
  pdl_launch_dependents();
  pdl_wait();  // the plan's rows
  FP4MOE_TRACE_WAITED();
  // (All three loaded together; only the row decides. A pair of another expert shard has loaded a
  // hidden block for nothing: a few KB at the token counts where it matters.)
  const int32_t row = p.ws.pair_row[pair];
  const int32_t id = p.ws.topk_ids[pair];
  const float weight = p.ws.topk_weights[pair];
  if (row < 0) return;
  const int local = id - p.expert_begin;
  // The row's router weight, for GEMM2's epilogue (one load there instead of two dependent ones; in
  // the plan, one CTA, these stores and their loads took it from 84 to 147 us at DeepSeek-R1 T=8192).
  if (blockIdx.y == 0 && threadIdx.x == 0) p.ws.row_weight[row] = weight;
  const float gs = p.w4a4 ? p.a1_gs[local] : 1.0f;
  write_row_share(p, share, row, weight, gs);
}

// The plan and the permute in one kernel, for at most kPlanPermuteMaxPairs routed pairs (decode):
// the permute's grid (a CTA per pair and column range), each CTA computing the plan of all pairs
// itself (they are few) and the row of its own pair; CTA (0, 0) writes the plan's tables, CTA
// (pair, 0) the pair's pair_row and row_pair. Rows within an expert's segment follow the pair order
// (every CTA must agree without atomics). One kernel and one dependency hop less than plan_kernel
// then permute_kernel, which is most of what separates a T=1 forward's GEMMs from its start.
// Shared memory: E_local counters.
constexpr int kPlanPermuteExpertsPerThread = 4;
static_assert(kPlanPermuteMaxPairs <= kRowThreads, "plan_permute: a thread per pair");
static_assert(routing::kMaxExperts <= kPlanPermuteExpertsPerThread * kRowThreads,
              "plan_permute: every local expert in a thread");

__global__ void __launch_bounds__(kRowThreads) plan_permute_kernel(PermuteParams p) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTracePlanPermute);
  extern __shared__ int32_t smem_first[];  // [E_local]: counts, then each expert's first row
  __shared__ int32_t ids[kPlanPermuteMaxPairs];
  __shared__ PlanSums warp_sums[kRowThreads / 32];
  __shared__ int32_t bad_ids;
  const int64_t pair = blockIdx.x;
  const int num_local = p.num_local_experts;
  const int num_pairs = int(p.num_tokens * p.top_k);
  const bool tables = blockIdx.x == 0 && blockIdx.y == 0;
  const RowShare share = p.plan_only ? RowShare{} : load_row_share(p, pair);  // before the wait
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) smem_first[e] = 0;
  if (threadIdx.x == 0) bad_ids = 0;
  pdl_launch_dependents();
  pdl_wait();  // the routing output
  FP4MOE_TRACE_WAITED();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int32_t my_id = -1;
  if (tid < num_pairs) ids[tid] = my_id = __ldcg(p.ws.topk_ids + tid);
  const float weight = p.ws.topk_weights[pair];
  if (tables) zero_split_counters(p);
  __syncthreads();
  if (tid < num_pairs) {
    if (my_id < 0 || my_id >= p.num_experts) atomicAdd(&bad_ids, 1);
    else if (my_id - p.expert_begin >= 0 && my_id - p.expert_begin < num_local)
      atomicAdd(&smem_first[my_id - p.expert_begin], 1);
  }
  __syncthreads();
  // The scan of plan_scan, a thread per kPlanPermuteExpertsPerThread consecutive experts.
  const int e0 = tid * kPlanPermuteExpertsPerThread;
  int32_t count[kPlanPermuteExpertsPerThread];
  PlanSums own[kPlanPermuteExpertsPerThread], sum = {0, 0, 0};
#pragma unroll
  for (int q = 0; q < kPlanPermuteExpertsPerThread; ++q) {
    count[q] = e0 + q < num_local ? smem_first[e0 + q] : 0;
    own[q] = expert_plan(p, count[q]);
    sum.rows += own[q].rows, sum.tiles += own[q].tiles, sum.tails += own[q].tails;
  }
  const PlanSums incl = warp_inclusive_sums(sum, lane);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  PlanSums base = {0, 0, 0}, total = {0, 0, 0};
#pragma unroll
  for (int w = 0; w < kRowThreads / 32; ++w) {
    const PlanSums v = warp_sums[w];
    if (w < warp) base.rows += v.rows, base.tiles += v.tiles, base.tails += v.tails;
    total.rows += v.rows, total.tiles += v.tiles, total.tails += v.tails;
  }
  int32_t row_at = base.rows + incl.rows - sum.rows, tile_at = base.tiles + incl.tiles - sum.tiles;
  int32_t tail_at = base.tails + incl.tails - sum.tails;
#pragma unroll
  for (int q = 0; q < kPlanPermuteExpertsPerThread; ++q) {
    const int e = e0 + q;
    if (e < num_local) {
      smem_first[e] = row_at;  // from here on: expert e's first row
      if (tables) {
        p.ws.counts[e] = count[q];
        p.ws.seg_start[e] = row_at;
        p.ws.tile_start[e] = tile_at;
        p.ws.tail_start[e] = tail_at;
      }
    }
    row_at += own[q].rows, tile_at += own[q].tiles, tail_at += own[q].tails;
  }
  if (tables) {
    if (tid == 0) {
      p.ws.seg_start[num_local] = total.rows;
      p.ws.tile_start[num_local] = total.tiles;
      p.ws.tail_start[num_local] = total.tails;
      p.ws.counts[num_local] = bad_ids;  // read by MoeLayer::check_device_errors()
    }
    zero_tile_done(p, total.tiles);
  }
  __syncthreads();
  // A pair's row: its expert's first row plus the earlier pairs of that expert. Its tables: pair_row,
  // row_pair and the row's router weight (for GEMM2's epilogue, as permute_kernel).
  auto pair_row = [&](int64_t q) {
    int local;
    if (!is_local_expert(ids[q], p.num_experts, p.expert_begin, num_local, &local)) return -1;
    int32_t row = smem_first[local];
    for (int j = 0; j < int(q); ++j) row += ids[j] == ids[q];
    return row;
  };
  auto write_pair_row = [&](int64_t q, int32_t row, float w) {
    p.ws.pair_row[q] = row;
    if (row >= 0) {
      p.ws.row_pair[row] = int32_t(q);
      p.ws.row_weight[row] = w;
    }
  };
  if (p.plan_only) {
    // One CTA (PermuteParams::plan_only): every pair's row, a thread per pair, and its padding.
    for (int q = tid; q < num_pairs; q += blockDim.x) {
      const int32_t row = pair_row(q);
      write_pair_row(q, row, p.ws.topk_weights[q]);
      if (row >= 0) zero_h_padding(p, row, 0, 1);
    }
    return;
  }
  // This CTA's pair's row.
  const int32_t row = pair_row(pair);
  if (blockIdx.y == 0 && tid == 0) write_pair_row(pair, row, weight);
  if (row < 0) return;
  const int local = ids[pair] - p.expert_begin;
  const float gs = p.w4a4 ? p.a1_gs[local] : 1.0f;
  write_row_share(p, share, row, weight, gs);
}

// A CTA per (token, kFinalizeColumns columns), so that a few tokens still spread over many SMs (one
// CTA per token left a T=1 forward waiting 26 us on one SM's load latency). Each thread sums 8
// columns over the slots in slot order, its K row loads issued before the first add.
constexpr int kFinalizeColumns = kRowThreads * 8;
constexpr int kMaxTopK = routing::kMaxTopK;

__global__ void __launch_bounds__(kRowThreads) finalize_kernel(PermuteParams p, uint16_t* out) {
  FP4MOE_TRACE_CTA(p.ws.trace, kTraceFinalize);
  const int64_t t = blockIdx.x;
  const int64_t H = p.hidden_size;
  const int K = p.top_k;
  const int64_t c = int64_t(blockIdx.y) * kFinalizeColumns + threadIdx.x * 8;
  __shared__ int32_t rows[kMaxTopK];
  // The token's rows, loaded before the wait: the plan was complete when the finalize was scheduled
  // (the sm90 GEMM2 lets it be only after its own wait or, with the overlap, starts after GEMM1's;
  // the simt GEMMs are launched without PDL), and its writes are read through L2 (ld.cg), as
  // GEMM2 reads them with the overlap (moe_gemm_sm90.cuh: a hardware assumption, not a PTX
  // guarantee). The next forward's first kernel waits for this one, so they are still this
  // forward's.
  const int32_t my_row = threadIdx.x < K ? __ldcg(p.ws.pair_row + t * K + threadIdx.x) : -1;
  pdl_launch_dependents();
  pdl_wait();  // GEMM2's y
  FP4MOE_TRACE_WAITED();
  if (threadIdx.x < K) rows[threadIdx.x] = my_row;
  __syncthreads();
  if (c >= H) return;
  uint4 v[kMaxTopK];
#pragma unroll
  for (int s = 0; s < kMaxTopK; ++s)
    if (s < K && rows[s] >= 0) v[s] = *reinterpret_cast<const uint4*>(p.ws.y + int64_t(rows[s]) * H + c);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int s = 0; s < kMaxTopK; ++s) {
    if (s >= K || rows[s] < 0) continue;
    const uint32_t w[4] = {v[s].x, v[s].y, v[s].z, v[s].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[2 * i] = add_rn(acc[2 * i], bf16_to_float(uint16_t(w[i] & 0xffff)));
      acc[2 * i + 1] = add_rn(acc[2 * i + 1], bf16_to_float(uint16_t(w[i] >> 16)));
    }
  }
  *reinterpret_cast<uint4*>(out + t * H + c) =
      make_uint4(pack_bf16x2(acc[0], acc[1]), pack_bf16x2(acc[2], acc[3]), pack_bf16x2(acc[4], acc[5]),
                 pack_bf16x2(acc[6], acc[7]));
}

}  // namespace

Status launch_plan(const PermuteParams& p, cudaStream_t stream) {
  if (p.tile_tokens <= 0 || p.tail_rows < 0 || (p.tail_rows > 0 && p.tail_rows >= p.tile_tokens))
    return internal_error("plan: tile_tokens ", p.tile_tokens, " with tail_rows ", p.tail_rows);
  const size_t smem = sizeof(int32_t) * size_t(p.num_local_experts);
  // (The forward's first kernel when it has no routing kernel: no programmatic dependent launch.)
  const bool pdl = !p.plan_is_first;
  if (p.num_tokens * p.top_k < kPlanMultiMinPairs)
    return launch_maybe_pdl(pdl, plan_kernel, dim3(1), dim3(kPlanThreads), smem, stream, p);
  FP4MOE_RETURN_IF_ERROR(
      launch_maybe_pdl(pdl, plan_count_kernel, dim3(kPlanCtas), dim3(kPlanThreads), smem, stream, p));
  FP4MOE_RETURN_IF_ERROR(launch_pdl(plan_scan_kernel, dim3(1), dim3(kPlanThreads), smem, stream, p));
  return launch_pdl(plan_assign_kernel, dim3(kPlanCtas), dim3(kPlanThreads), smem, stream, p);
}

Status launch_permute(const PermuteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return Status::Ok();
  // Up to 256 pairs, a CTA per pair and range of kRowThreads 16-element blocks; beyond, a CTA per pair.
  const int64_t pairs = p.num_tokens * p.top_k;
  const int64_t ranges = (p.layout.x_k / 16 + kRowThreads - 1) / kRowThreads;
  const unsigned y = unsigned(pairs <= 256 ? std::max<int64_t>(ranges, 1) : 1);
  return launch_pdl(permute_kernel, dim3(unsigned(pairs), y), dim3(kRowThreads), 0, stream, p);
}

Status launch_plan_and_permute(const PermuteParams& p, cudaStream_t stream) {
  const int64_t pairs = p.num_tokens * p.top_k;
  if (p.plan_only && (pairs == 0 || pairs > kPlanPermuteMaxPairs))
    return internal_error("plan: plan_only for ", pairs, " routed pairs");
  if (pairs == 0 || pairs > kPlanPermuteMaxPairs) {
    FP4MOE_RETURN_IF_ERROR(launch_plan(p, stream));
    return launch_permute(p, stream);
  }
  if (p.tile_tokens <= 0 || p.tail_rows < 0 || (p.tail_rows > 0 && p.tail_rows >= p.tile_tokens))
    return internal_error("plan: tile_tokens ", p.tile_tokens, " with tail_rows ", p.tail_rows);
  const int64_t ranges = (p.layout.x_k / 16 + kRowThreads - 1) / kRowThreads;
  const size_t smem = sizeof(int32_t) * size_t(p.num_local_experts);
  const dim3 grid = p.plan_only ? dim3(1) : dim3(unsigned(pairs), unsigned(std::max<int64_t>(ranges, 1)));
  return launch_maybe_pdl(!p.plan_is_first, plan_permute_kernel, grid, dim3(kRowThreads), smem, stream, p);
}

Status launch_finalize(const PermuteParams& p, uint16_t* out, cudaStream_t stream) {
  if (p.num_tokens == 0) return Status::Ok();
  if (p.top_k > kMaxTopK) return internal_error("finalize: top_k ", p.top_k, " > ", kMaxTopK);
  const unsigned column_blocks = unsigned((p.hidden_size + kFinalizeColumns - 1) / kFinalizeColumns);
  return launch_pdl(finalize_kernel, dim3(unsigned(p.num_tokens), column_blocks), dim3(kRowThreads), 0, stream, p,
                    out);
}

}  // namespace fp4moe
